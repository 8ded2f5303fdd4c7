package bgp

import (
	"context"
	"log/slog"
)

// gobgpLogger returns the logger GoBGP writes to: l's handler, with every
// record tagged component=gobgp, and GoBGP's info chatter (one line per
// session event, per policy change) lowered to debug. Its warnings and
// errors keep their level.
func gobgpLogger(l *slog.Logger) *slog.Logger {
	return slog.New(gobgpHandler{h: l.Handler()}).With("component", "gobgp")
}

// gobgpHandler lowers info records to debug before its inner handler sees
// them.
type gobgpHandler struct {
	h slog.Handler
}

func demote(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (g gobgpHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return g.h.Enabled(ctx, demote(l))
}

func (g gobgpHandler) Handle(ctx context.Context, r slog.Record) error {
	if d := demote(r.Level); d != r.Level {
		nr := slog.NewRecord(r.Time, d, r.Message, r.PC)
		r.Attrs(func(a slog.Attr) bool {
			nr.AddAttrs(a)
			return true
		})
		r = nr
	}
	return g.h.Handle(ctx, r)
}

func (g gobgpHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return gobgpHandler{h: g.h.WithAttrs(as)}
}

func (g gobgpHandler) WithGroup(name string) slog.Handler {
	return gobgpHandler{h: g.h.WithGroup(name)}
}
