package bgp

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestGoBGPLogger: GoBGP's info lines reach vipd's handler at debug level,
// its warnings and errors keep theirs, and every line says
// component=gobgp; an info-level handler drops GoBGP's info lines.
func TestGoBGPLogger(t *testing.T) {
	var buf bytes.Buffer
	l := gobgpLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Info("state changed", "Key", "192.0.2.254")
	l.Warn("prefix limit", "Key", "192.0.2.254")
	l.With("Topic", "Peer").Error("read failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=DEBUG msg="state changed" component=gobgp Key=192.0.2.254`,
		`level=WARN msg="prefix limit" component=gobgp Key=192.0.2.254`,
		`level=ERROR msg="read failed" component=gobgp Topic=Peer`,
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d = %q, want it to end with %q", i, lines[i], w)
		}
	}

	buf.Reset()
	l = gobgpLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	if l.Enabled(t.Context(), slog.LevelInfo) {
		t.Error("an info-level handler takes GoBGP's info lines, want them as debug")
	}
	l.Info("state changed")
	l.Warn("prefix limit")
	if got := buf.String(); strings.Contains(got, "state changed") || !strings.Contains(got, "prefix limit") {
		t.Errorf("info-level handler logged %q, want only the warning", got)
	}
}
