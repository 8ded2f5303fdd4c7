package membership

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// sendFailureEvery is how often one kind of memberlist warning or error is
// logged: while a link is down memberlist fails to send gossip and probes
// several times a second, and a host sending garbage to the membership port
// makes one error per packet.
const sendFailureEvery = 10 * time.Second

// slogWriter adapts memberlist's log lines ("[WARN] memberlist: ...") to
// slog levels. Warnings and errors are logged each kind (logKind) at most
// once per sendFailureEvery, with the number of lines left out since; send
// failures ("Failed to send gossip to ...: ... network is unreachable") at
// WARN.
type slogWriter struct {
	lg  *slog.Logger
	now func() time.Time

	mu         sync.Mutex
	lastLogged map[string]time.Time // kind -> when last logged
	suppressed map[string]int
	// The budget: at most logBudget lines per window of sendFailureEvery
	// whatever their kinds (text a sender chooses, a label or a node name,
	// makes new kinds); the rest are counted in overBudget.
	windowStart time.Time
	inWindow    int
	overBudget  int
}

// logBudget bounds memberlist warnings and errors per sendFailureEvery,
// all kinds together.
const logBudget = 20

// maxLogKinds bounds the kinds remembered; older ones are forgotten first.
const maxLogKinds = 256

func newSlogWriter(lg *slog.Logger, now func() time.Time) *slogWriter {
	return &slogWriter{lg: lg, now: now, lastLogged: map[string]time.Time{}, suppressed: map[string]int{}}
}

func (w *slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	level := slog.LevelDebug
	for prefix, l := range map[string]slog.Level{"[ERR]": slog.LevelError, "[WARN]": slog.LevelWarn, "[INFO]": slog.LevelDebug} {
		if strings.HasPrefix(s, prefix) {
			level = l
			s = strings.TrimSpace(strings.TrimPrefix(s, prefix))
		}
	}
	s = strings.TrimPrefix(s, "memberlist: ")
	if level < slog.LevelWarn {
		w.lg.Log(context.Background(), level, s)
		return len(p), nil
	}
	kind, sendFailure := sendFailureKind(s)
	if sendFailure {
		level = slog.LevelWarn
	} else {
		kind = logKind(s)
	}
	n, logNow := w.throttle(kind)
	if !logNow {
		return len(p), nil
	}
	if n > 0 {
		w.lg.Log(context.Background(), level, s, "suppressed", n)
	} else {
		w.lg.Log(context.Background(), level, s)
	}
	return len(p), nil
}

// quoted, nodeName and number match what varies in memberlist's messages:
// quoted text (a node name, a label a sender chose), an unquoted node name,
// a number (an address, a port, a message type).
var (
	quoted   = regexp.MustCompile(`'[^']*'|"[^"]*"`)
	nodeName = regexp.MustCompile(`\bnode \S+`)
	number   = regexp.MustCompile(`[0-9]+`)
)

// logKind is what a warning or error is about, without what varies (the
// peer, the address, the detail): "Failed to decode ping request" for
// "Failed to decode ping request: msgpack ... from=203.0.113.9:7946", so a
// flood of garbage packets logs one line per kind every sendFailureEvery.
func logKind(s string) string {
	// Quoted text first: a label can hold ": ".
	s = nodeName.ReplaceAllString(quoted.ReplaceAllString(s, "'*'"), "node *")
	if i := strings.Index(s, ": "); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, " from="); i >= 0 {
		s = s[:i]
	}
	return number.ReplaceAllString(s, "N")
}

// sendFailureKind returns "Failed to send gossip" for "Failed to send
// gossip to 192.0.2.12:7946: ...".
func sendFailureKind(s string) (string, bool) {
	const prefix = "Failed to send "
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return "", false
	}
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		rest = rest[:i]
	}
	rest, _, _ = strings.Cut(rest, " to ")
	return prefix + rest, true
}

// throttle reports whether a line of kind is logged now and how many of
// its kind were left out since the last one logged.
func (w *slogWriter) throttle(kind string) (int, bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.windowStart) >= sendFailureEvery || now.Before(w.windowStart) {
		if w.overBudget > 0 {
			w.lg.Warn("memberlist warnings and errors left out (over the log budget)", "suppressed", w.overBudget, "budget", logBudget, "per", sendFailureEvery)
		}
		w.windowStart, w.inWindow, w.overBudget = now, 0, 0
	}
	if last, ok := w.lastLogged[kind]; ok && now.Sub(last) < sendFailureEvery && now.Sub(last) >= 0 {
		w.suppressed[kind]++
		return 0, false
	}
	if w.inWindow >= logBudget {
		w.overBudget++
		return 0, false
	}
	w.inWindow++
	if len(w.lastLogged) >= maxLogKinds {
		w.prune(now)
	}
	n := w.suppressed[kind]
	w.lastLogged[kind], w.suppressed[kind] = now, 0
	return n, true
}

// prune forgets kinds not logged for a window (then the oldest half), so
// text chosen by senders cannot grow the maps without bound.
func (w *slogWriter) prune(now time.Time) {
	for k, t := range w.lastLogged {
		if now.Sub(t) >= sendFailureEvery {
			delete(w.lastLogged, k)
			delete(w.suppressed, k)
		}
	}
	for k := range w.lastLogged {
		if len(w.lastLogged) < maxLogKinds/2 {
			break
		}
		delete(w.lastLogged, k)
		delete(w.suppressed, k)
	}
}
