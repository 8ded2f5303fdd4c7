package bgp

import (
	"context"
	"log/slog"
	"sort"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// gobgpLogger adapts GoBGP's logger interface to slog. GoBGP's info and debug
// chatter goes to debug; its warnings and errors keep their level.
type gobgpLogger struct {
	l *slog.Logger
}

var _ gobgplog.Logger = gobgpLogger{}

func (g gobgpLogger) log(level slog.Level, msg string, fields gobgplog.Fields) {
	ctx := context.Background()
	if !g.l.Enabled(ctx, level) {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	attrs = append(attrs, slog.String("component", "gobgp"))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, fields[k]))
	}
	g.l.LogAttrs(ctx, level, msg, attrs...)
}

func (g gobgpLogger) Panic(msg string, fields gobgplog.Fields) {
	g.log(slog.LevelError, msg, fields)
	panic("gobgp: " + msg)
}

// Fatal logs at error level and panics: GoBGP calls it on internal bugs and
// does not expect it to return. A panic (rather than os.Exit) lets deferred
// cleanup run and shows the stack.
func (g gobgpLogger) Fatal(msg string, fields gobgplog.Fields) {
	g.log(slog.LevelError, msg, fields)
	panic("gobgp: " + msg)
}

func (g gobgpLogger) Error(msg string, fields gobgplog.Fields) { g.log(slog.LevelError, msg, fields) }
func (g gobgpLogger) Warn(msg string, fields gobgplog.Fields)  { g.log(slog.LevelWarn, msg, fields) }
func (g gobgpLogger) Info(msg string, fields gobgplog.Fields)  { g.log(slog.LevelDebug, msg, fields) }
func (g gobgpLogger) Debug(msg string, fields gobgplog.Fields) { g.log(slog.LevelDebug, msg, fields) }

// SetLevel is ignored: the slog handler decides.
func (g gobgpLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel reports debug when the handler takes debug records, so GoBGP skips
// building debug messages nobody reads.
func (g gobgpLogger) GetLevel() gobgplog.LogLevel {
	if g.l.Enabled(context.Background(), slog.LevelDebug) {
		return gobgplog.DebugLevel
	}
	return gobgplog.InfoLevel
}
