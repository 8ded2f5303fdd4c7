package upgrade

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// previousRelease is the commit of the release before this tree: the
// rolling upgrade goes from it to the current tree and back. Move it
// forward when a release is cut (docs/operations.md, "Upgrading vipd").
const previousRelease = "d9e3df7"

const (
	probeInterval  = 20 * time.Millisecond
	sampleInterval = 20 * time.Millisecond
	// steady is how long the cluster runs mixed after a step before the
	// next node is restarted.
	steady = 2 * time.Second
	// handoffSlack is how long after a stopping vipd exited its address
	// may still be seen (the sample that read it started before the exit).
	handoffSlack = 2 * sampleInterval
)

// previousBinaries returns the directory holding vipd and vipctl of
// previousRelease: $VIPD_PREV_BIN, else built from git into a temporary
// directory.
func previousBinaries(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("VIPD_PREV_BIN"); dir != "" {
		for _, b := range []string{"vipd", "vipctl"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				t.Fatalf("VIPD_PREV_BIN=%s: %v", dir, err)
			}
		}
		return dir
	}
	root, err := run("", "git", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Fatalf("the rolling-upgrade lab builds the previous release (%s) from git, but this is not a git checkout: %v\n"+
			"(set VIPD_PREV_BIN to a directory holding that release's vipd and vipctl)", previousRelease, err)
	}
	root = strings.TrimSpace(root)
	if _, err := run(root, "git", "cat-file", "-e", previousRelease+"^{commit}"); err != nil {
		t.Fatalf("the previous release %s is not in this clone (%s): the rolling-upgrade lab builds it from git.\n"+
			"Fetch it (a shallow CI checkout: git fetch --unshallow, or git fetch origin %s), or set VIPD_PREV_BIN "+
			"to a directory holding that release's vipd and vipctl.", previousRelease, root, previousRelease)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", previousRelease)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr, tarErr strings.Builder
	archive.Stderr, untar.Stderr = &archErr, &tarErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s", previousRelease, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("extract %s: %v: %s", previousRelease, err, tarErr.String())
	}
	bin := filepath.Join(src, "bin")
	start := time.Now()
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+previousRelease,
		"-o", bin+"/", "./cmd/vipd", "./cmd/vipctl")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the previous release %s: %v\n%s", previousRelease, err, out)
	}
	t.Logf("built the previous release %s in %v", previousRelease, time.Since(start).Round(100*time.Millisecond))
	return bin
}

func run(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// version returns what `vipd --version` prints for the binary (without
// the leading "vipd ").
func version(t *testing.T, bin string) string {
	t.Helper()
	out, err := run("", bin, "--version")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(strings.TrimSpace(out), "vipd ")
}

// stopWindow is when a node's vipd was stopping: from SIGTERM to its exit.
type stopWindow struct {
	node     string
	from, to time.Time
}

// checkHolders returns a description of every sample that does not show
// exactly one holder, except two while one of them was stopping (its
// make-before-break handoff).
func checkHolders(samples netlab.HolderSamples, stops []stopWindow) []string {
	var bad []string
	for _, s := range samples {
		switch {
		case len(s.Holders) == 1:
			continue
		case len(s.Holders) == 2 && slices.ContainsFunc(stops, func(w stopWindow) bool {
			return s.Has(w.node) && !s.At.Before(w.from) && !s.At.After(w.to.Add(handoffSlack))
		}):
			continue
		}
		bad = append(bad, fmt.Sprintf("%s holders %v", s.At.Format("15:04:05.000"), s.Holders))
	}
	return bad
}

// moves counts how often the single holder changed.
func moves(samples netlab.HolderSamples) int {
	n, last := 0, ""
	for _, s := range samples {
		if len(s.Holders) != 1 {
			continue
		}
		if last != "" && s.Holders[0] != last {
			n++
		}
		last = s.Holders[0]
	}
	return n
}

// install copies bin to node h's own vipd path (h.Dir/bin/vipd), as a
// package manager does: a new file renamed over the old one, so a vipd
// running from it keeps its (deleted) binary, and asking the path says what
// will start next (vipd --restart-protocol).
func install(t *testing.T, h *netlab.Host, bin string) string {
	t.Helper()
	dst := filepath.Join(h.Dir, "bin", "vipd")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// pass is one pass over the nodes: what it does and its window.
type pass struct {
	name     string
	from, to time.Time
	inPlace  bool // every restart of the pass keeps the VIP where it is
}

// TestRollingUpgrade rolls a cluster from the previous release to this
// tree, restarts every node once more on this tree (in place), and rolls
// back, one node at a time, under client load. A node runs its vipd from
// a path of its own, replaced by each step as a package upgrade would.
//
//   - upgrade: the previous release stops with SIGTERM (it hands off);
//   - restart: this release stops with SIGUSR2 (a restart, as systemd's
//     restart job is) and the same binary starts: in place, the VIP never
//     moves, one holder at every sample, no failed request;
//   - downgrade: the previous release is installed, then this release's
//     vipd stops with SIGUSR2: it asks the binary now installed whether it
//     adopts VIPs, hears no, and hands off instead of leaving the VIP to a
//     start-up sweep.
func TestRollingUpgrade(t *testing.T) {
	netlab.SkipUnlessEnabled(t)
	began := time.Now()
	res := Result{Previous: previousRelease}
	if path := os.Getenv(ResultsEnv); path != "" {
		// Registered first, so it runs last: after the lab is gone and
		// whether the test passed or not.
		t.Cleanup(func() {
			res.Duration, res.Failed = time.Since(began), t.Failed()
			if err := writeResult(path, res); err != nil {
				t.Error(err)
			}
		})
	}
	prevBin := previousBinaries(t)
	// Every wait for the cluster to agree after a step gets 30 s.
	l := netlab.New(t, netlab.Options{Settle: 30 * time.Second})
	prev, cur := filepath.Join(prevBin, "vipd"), l.Tools.Vipd
	prevVersion, curVersion := version(t, prev), version(t, cur)
	if prevVersion == curVersion {
		t.Fatalf("the previous release and this tree both report version %q: the lab could not tell them apart", prevVersion)
	}
	t.Logf("previous release: %s; this tree: %s", prevVersion, curVersion)
	res.PreviousVersion, res.Version = prevVersion, curVersion
	l.StartHTTPAll()
	o := netlab.VipdOptions{}
	vip := l.DefaultVIPs()[0]
	running := map[string]string{} // node -> version
	for _, n := range l.Nodes {
		l.StartVipdWith(n, install(t, n, prev), l.VipdConfig(n, o))
		running[n.Name] = prevVersion
	}
	holder, err := l.WaitSteady(vip, l.Settle)
	if err != nil {
		t.Fatal(err)
	}

	rec := l.RecordHolders(vip.Address, sampleInterval, 10*time.Minute)
	pr := l.StartProber(netlab.ProbeOptions{Interval: probeInterval, Duration: 10 * time.Minute})
	t.Cleanup(func() {
		if pr.Running() {
			pr.Stop()
		}
		rec.Stop()
	})
	if err := pr.WaitServedBy(holder.Name, 10, time.Now(), 10*time.Second); err != nil {
		t.Fatal(err)
	}

	var stops []stopWindow
	// step installs bin on n, stops its vipd with sig, starts the installed
	// one, and waits until every node agrees on one owner and runs the
	// version it should.
	step := func(p *pass, n *netlab.Host, bin, ver string, sig syscall.Signal) {
		t.Helper()
		pr.Mark(p.name + " " + n.Name)
		path := install(t, n, bin)
		w := stopWindow{node: n.Name, from: time.Now()}
		if err := l.StopVipd(n, sig, l.Settle); err != nil {
			t.Fatalf("%s %s: stop: %v", p.name, n.Name, err)
		}
		w.to = time.Now()
		if !p.inPlace {
			stops = append(stops, w)
		}
		l.StartVipdWith(n, path, l.VipdConfig(n, o))
		running[n.Name] = ver
		if err := l.WaitAlive(n, l.Nodes, l.Settle); err != nil {
			t.Fatalf("%s %s: %v", p.name, n.Name, err)
		}
		owner, err := l.WaitOneHolder(vip, l.Settle)
		if err != nil {
			t.Fatalf("%s %s: versions %v: %v", p.name, n.Name, running, err)
		}
		for _, m := range l.Nodes {
			st, err := l.Status(m)
			if err != nil {
				t.Fatalf("%s %s: %v", p.name, n.Name, err)
			}
			if st.Version != running[m.Name] {
				t.Errorf("%s %s: %s reports version %q, want %q", p.name, n.Name, m.Name, st.Version, running[m.Name])
			}
		}
		t.Logf("%s %s: stopped in %v; owner %s agreed by all, versions %v", p.name, n.Name,
			w.to.Sub(w.from).Round(time.Millisecond), owner, running)
		time.Sleep(steady)
	}
	passes := []*pass{{name: "upgrade"}, {name: "restart", inPlace: true}, {name: "downgrade"}}
	passes[0].from = time.Now()
	for _, n := range l.Nodes {
		step(passes[0], n, cur, curVersion, syscall.SIGTERM)
	}
	passes[0].to, passes[1].from = time.Now(), time.Now()
	for _, n := range l.Nodes {
		step(passes[1], n, cur, curVersion, syscall.SIGUSR2)
	}
	passes[1].to, passes[2].from = time.Now(), time.Now()
	for _, n := range slices.Backward(l.Nodes) {
		step(passes[2], n, prev, prevVersion, syscall.SIGUSR2)
	}
	passes[2].to = time.Now()
	probes := pr.Stop()
	samples, errs := rec.Stop()
	for _, e := range errs {
		t.Errorf("holder sampling: %s", e)
	}
	if problems := pr.Problems(); len(problems) > 0 {
		t.Errorf("prober: %v", problems)
	}

	for _, p := range passes {
		var failed []string
		resets, total := 0, 0
		for _, pb := range probes {
			if pb.Start.Before(p.from) || !pb.Start.Before(p.to) {
				continue
			}
			total++
			if !pb.OK {
				failed = append(failed, pb.Start.Format("15:04:05.000")+" "+pb.Detail)
				if strings.Contains(pb.Detail, "connection reset by peer") {
					resets++
				}
			}
		}
		ss := samples.Between(p.from, p.to)
		moved := moves(ss)
		res.Passes = append(res.Passes, passResult(p, total, failed, resets, ss, moved))
		t.Logf("%s pass: %v, %d probes, %d failed; %d holder samples (%s); the VIP moved %d times",
			p.name, p.to.Sub(p.from).Round(time.Millisecond), total, len(failed), len(ss), ss.Summary(), moved)
		if want := int(p.to.Sub(p.from)/probeInterval) / 2; total < want {
			t.Errorf("%s pass: only %d probes in %v, want at least %d", p.name, total, p.to.Sub(p.from).Round(time.Millisecond), want)
		}
		allowed := moved // one reset per move of the VIP
		if p.inPlace {
			allowed = 0
			if moved > 0 {
				t.Errorf("%s pass: the VIP moved %d times; restarts in place move nothing", p.name, moved)
			}
		}
		if len(failed) > resets || resets > allowed {
			t.Errorf("%s pass: %d requests failed (%d resets, %d allowed: one per move of the VIP, nothing else):\n%s",
				p.name, len(failed), resets, allowed, strings.Join(failed, "\n"))
		} else if len(failed) > 0 {
			t.Logf("%s pass: %d connections open across a move of the VIP were reset: %v", p.name, len(failed), failed)
		}
		if bad := checkHolders(ss, stops); len(bad) > 0 {
			t.Errorf("%s pass: %d of %d samples without exactly one holder (outside a stopping node's handoff): %s\ntransitions: %v",
				p.name, len(bad), len(ss), strings.Join(bad[:min(len(bad), 20)], "; "), ss.Transitions())
		}
	}
	// The downgrade handed off because the next binary does not adopt,
	// and the restart pass was in place on every node.
	for _, n := range l.Nodes {
		log, _ := n.VipdLog()
		if got := len(netlab.LogLines(log, "stopped for a restart in place")); got != 1 {
			t.Errorf("%s stopped for a restart in place %d times, want once (the restart pass)", n.Name, got)
		}
		if got := len(netlab.LogLines(log, "does not take VIPs over")); got != 1 {
			t.Errorf("%s: %d times the next binary did not adopt, want once (the downgrade)", n.Name, got)
		}
	}
	if t.Failed() {
		l.DumpLogs()
	}
	t.Logf("rolling upgrade, restart and rollback: %v in all (build included)", time.Since(began).Round(time.Second))
}

// passResult is a pass's figures as Result holds them.
func passResult(p *pass, probes int, failed []string, resets int, ss netlab.HolderSamples, moved int) Pass {
	r := Pass{Name: p.name, InPlace: p.inPlace, Duration: p.to.Sub(p.from), Probes: probes, Failed: len(failed),
		Resets: resets, Samples: len(ss), NoHolder: ss.Count(0), Moves: moved}
	r.TwoHolders = len(ss.Where(func(s netlab.HolderSample) bool { return len(s.Holders) >= 2 }))
	if len(failed) > 0 {
		r.FirstFailure = failed[0]
	}
	return r
}

// writeResult writes r as JSON to path.
func writeResult(path string, r Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the results (%s): %w", ResultsEnv, err)
	}
	return nil
}

// TestCheckHolders covers the holder rule the lab applies.
func TestCheckHolders(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int, holders ...string) netlab.HolderSample {
		return netlab.HolderSample{At: t0.Add(time.Duration(ms) * time.Millisecond), Holders: holders}
	}
	stops := []stopWindow{{node: "n1", from: t0.Add(100 * time.Millisecond), to: t0.Add(300 * time.Millisecond)}}
	for _, tt := range []struct {
		name    string
		samples netlab.HolderSamples
		bad     int
		moves   int
	}{
		{"one holder throughout", netlab.HolderSamples{at(0, "n1"), at(20, "n1")}, 0, 0},
		{"handoff overlap while n1 stops", netlab.HolderSamples{at(0, "n1"), at(150, "n1", "n2"), at(320, "n2")}, 0, 1},
		{"overlap just after n1 exited", netlab.HolderSamples{at(0, "n1"), at(330, "n1", "n2"), at(360, "n2")}, 0, 1},
		{"two holders, neither stopping", netlab.HolderSamples{at(0, "n2"), at(150, "n2", "n3")}, 1, 0},
		{"two holders long after the stop", netlab.HolderSamples{at(0, "n1"), at(900, "n1", "n2")}, 1, 0},
		{"nobody holds", netlab.HolderSamples{at(0, "n1"), at(150), at(320, "n2")}, 1, 1},
		{"moved back and forth", netlab.HolderSamples{at(0, "n1"), at(20, "n2"), at(40, "n1")}, 0, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkHolders(tt.samples, stops); len(got) != tt.bad {
				t.Errorf("checkHolders = %v, want %d bad samples", got, tt.bad)
			}
			if got := moves(tt.samples); got != tt.moves {
				t.Errorf("moves = %d, want %d", got, tt.moves)
			}
		})
	}
}

// TestPassResult covers the figures a pass writes to $VIPD_UPGRADE_RESULTS
// and their round trip through the file.
func TestPassResult(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int, holders ...string) netlab.HolderSample {
		return netlab.HolderSample{At: t0.Add(time.Duration(ms) * time.Millisecond), Holders: holders}
	}
	p := &pass{name: "upgrade", from: t0, to: t0.Add(3 * time.Second)}
	ss := netlab.HolderSamples{at(0, "n1"), at(20, "n1", "n2"), at(40, "n2"), at(60), at(80, "n1", "n2", "n3"), at(100, "n3")}
	failed := []string{"00:00:00.020 connection reset by peer", "00:00:00.040 timeout"}
	got := passResult(p, 150, failed, 1, ss, moves(ss))
	want := Pass{Name: "upgrade", Duration: 3 * time.Second, Probes: 150, Failed: 2, Resets: 1,
		Samples: 6, TwoHolders: 2, NoHolder: 1, Moves: 2, FirstFailure: failed[0]}
	if got != want {
		t.Errorf("passResult = %+v, want %+v", got, want)
	}
	if in := passResult(&pass{name: "restart", inPlace: true}, 10, nil, 0, ss[:1], 0); in.FirstFailure != "" || !in.InPlace || in.Samples != 1 {
		t.Errorf("passResult of a clean pass in place = %+v", in)
	}

	path := filepath.Join(t.TempDir(), "upgrade.json")
	r := Result{Previous: previousRelease, PreviousVersion: previousRelease, Version: "abc1234", Passes: []Pass{got}, Duration: time.Minute}
	if err := writeResult(path, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Passes) != 1 || back.Passes[0] != want || back.Version != "abc1234" || back.Duration != time.Minute {
		t.Errorf("read back %+v, wrote %+v", back, r)
	}
	if err := writeResult(filepath.Join(path, "not-a-dir", "x.json"), r); err == nil {
		t.Error("writeResult into a missing directory: no error")
	}
}
