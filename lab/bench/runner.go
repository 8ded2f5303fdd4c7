package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// T runs lab code written for tests (lab/netlab and
// internal/netnstest/routers take a testing.TB) outside `go test`: Fatal
// ends the calling goroutine like it does in a test, Cleanup functions run
// when Do returns, and log lines go to a writer.
//
// T embeds a nil testing.TB only to satisfy the interface's unexported
// method; every method the lab packages call is implemented here, and any
// other (Setenv, Chdir, ...) panics.
type T struct {
	testing.TB

	name string
	log  io.Writer
	ctx  context.Context

	mu       sync.Mutex
	failed   bool
	skipped  bool
	msgs     []string
	cleanups []func()
}

// maxLogLine bounds one log message of a T.
const maxLogLine = 4000

// Do runs f with a new T called name on its own goroutine, then the
// cleanups f registered, newest first. It returns an error with every
// Error/Fatal/Skip message when f failed.
func Do(ctx context.Context, name string, log io.Writer, f func(t *T)) error {
	t := &T{name: name, log: log, ctx: ctx}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.runCleanups()
		f(t)
	}()
	<-done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed || t.skipped {
		return fmt.Errorf("%s: %s", name, strings.Join(t.msgs, "; "))
	}
	return nil
}

func (t *T) runCleanups() {
	for {
		t.mu.Lock()
		if len(t.cleanups) == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[len(t.cleanups)-1]
		t.cleanups = t.cleanups[:len(t.cleanups)-1]
		t.mu.Unlock()
		// A Fatal inside a cleanup ends only that cleanup.
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		<-done
	}
}

// Name returns the name given to Do.
func (t *T) Name() string { return t.name }

// Helper does nothing.
func (t *T) Helper() {}

// Context returns the context given to Do.
func (t *T) Context() context.Context { return t.ctx }

// Log writes a log line.
func (t *T) Log(args ...any) { t.Logf("%s", fmt.Sprintln(args...)) }

// Logf writes a log line.
func (t *T) Logf(format string, args ...any) {
	if t.log == nil {
		return
	}
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	// Lab log dumps (every vipd log after a failure) would bury the
	// progress lines: keep their start.
	if len(msg) > maxLogLine {
		msg = fmt.Sprintf("%s ... (%d more bytes)", msg[:maxLogLine], len(msg)-maxLogLine)
	}
	fmt.Fprintf(t.log, "    %s: %s\n", t.name, msg)
}

// Error records a failure and goes on.
func (t *T) Error(args ...any) { t.Errorf("%s", strings.TrimRight(fmt.Sprintln(args...), "\n")) }

// Errorf records a failure and goes on.
func (t *T) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.Logf("ERROR: %s", msg)
	t.mu.Lock()
	t.failed = true
	t.msgs = append(t.msgs, msg)
	t.mu.Unlock()
}

// Fail records a failure.
func (t *T) Fail() { t.mu.Lock(); t.failed = true; t.mu.Unlock() }

// Failed reports whether a failure was recorded.
func (t *T) Failed() bool { t.mu.Lock(); defer t.mu.Unlock(); return t.failed }

// FailNow records a failure and ends the calling goroutine.
func (t *T) FailNow() { t.Fail(); runtime.Goexit() }

// Fatal is Error then FailNow.
func (t *T) Fatal(args ...any) { t.Error(args...); runtime.Goexit() }

// Fatalf is Errorf then FailNow.
func (t *T) Fatalf(format string, args ...any) { t.Errorf(format, args...); runtime.Goexit() }

// Skip records why the run cannot go on and ends the calling goroutine.
func (t *T) Skip(args ...any) { t.Skipf("%s", strings.TrimRight(fmt.Sprintln(args...), "\n")) }

// Skipf records why the run cannot go on and ends the calling goroutine.
func (t *T) Skipf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	t.Logf("SKIP: %s", msg)
	t.mu.Lock()
	t.skipped = true
	t.msgs = append(t.msgs, "skipped: "+msg)
	t.mu.Unlock()
	runtime.Goexit()
}

// SkipNow is Skip without a message.
func (t *T) SkipNow() { t.Skipf("skipped") }

// Skipped reports whether Skip was called.
func (t *T) Skipped() bool { t.mu.Lock(); defer t.mu.Unlock(); return t.skipped }

// Cleanup registers f to run when Do returns.
func (t *T) Cleanup(f func()) { t.mu.Lock(); t.cleanups = append(t.cleanups, f); t.mu.Unlock() }

// TempDir returns a new directory removed at cleanup.
func (t *T) TempDir() string {
	dir, err := os.MkdirTemp("", "vipbench-")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
