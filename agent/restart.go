package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
)

// Restarts in place (docs/design.md, "Restarting in place"). A process
// that stops for a restart (systemctl restart, a package upgrade) leaves
// its VIPs where they are: it records them for its successor, gives the
// addresses a kernel lifetime of the grace (so they go by themselves if no
// process takes them over), tells every member it is restarting and waits
// until each has taken it (lease.Runner.AnnounceRestart), and exits
// without handing off or leaving. The peers take it for alive and holding
// until the grace runs out, then for crashed. The next process adopts the
// recorded VIPs it still has in the kernel and holds them without the
// lease's evidence until the record's deadline; after it, only with it.

// StopKind is what a stop of the daemon is for.
type StopKind int

const (
	// StopHandoff: a stop (systemctl stop, a shutdown, a package removal):
	// the VIPs are handed off make-before-break.
	StopHandoff StopKind = iota
	// StopRestart: a restart, with a successor due within
	// cluster.restart_grace: the VIPs stay.
	StopRestart
)

func (k StopKind) String() string {
	if k == StopRestart {
		return "restart"
	}
	return "stop"
}

// RestartProtocol is the version of the restart record this release
// writes and the highest it adopts. A stopping process restarts in place
// only when the binary that starts next says it adopts at least this
// version (Options.NextAdopts): `vipd --restart-protocol` prints it.
const RestartProtocol = 1

// Restarter is implemented by Backends whose announcements can outlive the
// process for a restart in place.
type Restarter interface {
	// RestartReady reports whether what the backends announce survives
	// the process exit until a successor takes it over (BGP: every
	// established session negotiated graceful restart); why says what
	// does not.
	RestartReady(ctx context.Context) (ok bool, why string)
	// Detach ends the backends for a restart in place: their
	// announcements stay for the process exit to leave to the routers.
	Detach()
}

// Lifetimer is implemented by announcers whose address can get a kernel
// lifetime: a VIP left for a restart in place goes by itself when no
// process takes it over (l2.Announcer.SetLifetime; 0: forever). Held
// reports whether the address is on the host, whatever its lifetime
// (Verify reports an IPv6 address with one as not as Announce leaves it).
type Lifetimer interface {
	SetLifetime(ctx context.Context, addr netip.Addr, life time.Duration) error
	Held(addr netip.Addr) (bool, error)
}

// restartFile is the record a process stopping for a restart in place
// leaves in state_dir.
const restartFile = "restart.json"

// restartRecord is that record. The deadline is on CLOCK_BOOTTIME, which
// the next process reads the same (it counts from the boot, suspend
// included, and no wall-clock step moves it), and only for this boot.
type restartRecord struct {
	Version    int          `json:"version"`
	Node       string       `json:"node"`
	BootID     string       `json:"boot_id"`
	DeadlineNs int64        `json:"deadline_boottime_ns"`
	VIPs       []restartVIP `json:"vips"`
}

// restartVIP is a VIP left for the next process, with what it was.
type restartVIP struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	Mode      string `json:"mode"`
	Interface string `json:"interface"`
	Healthy   bool   `json:"healthy"`
}

// bootClock returns this boot's id and CLOCK_BOOTTIME.
func bootClock() (id string, now time.Duration, err error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", 0, fmt.Errorf("boot id: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, fmt.Errorf("CLOCK_BOOTTIME: %w", err)
	}
	return strings.TrimSpace(string(b)), time.Duration(ts.Nano()), nil
}

func saveRestart(dir string, r restartRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", restartFile, err)
	}
	return writeFileAtomic(filepath.Join(dir, restartFile), append(b, '\n'), 0o640)
}

// loadRestart reads the restart record and says how long it is good for:
// left is zero (and the record of no use) when there is none, it is of
// another boot or a newer protocol, or its deadline has passed; and never
// more than config.MaxRestartGrace, whatever deadline it names (no peer
// waits longer).
func loadRestart(dir string) (r restartRecord, left time.Duration, err error) {
	b, err := readStateFile(filepath.Join(dir, restartFile))
	if errors.Is(err, fs.ErrNotExist) {
		return r, 0, nil
	}
	if err != nil {
		return r, 0, fmt.Errorf("restart record: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, 0, fmt.Errorf("restart record %s: %w", filepath.Join(dir, restartFile), err)
	}
	id, now, err := bootClock()
	if err != nil {
		return r, 0, err
	}
	if r.Version < 1 || r.Version > RestartProtocol || r.BootID != id {
		return r, 0, nil
	}
	return r, min(max(time.Duration(r.DeadlineNs)-now, 0), config.MaxRestartGrace), nil
}

// recordHold is how long a process started for a restart in place holds
// what it adopts on the record's word at most: 0.98 of its grace, as the
// stopping process writes its deadline (the peers count the grace from
// when they heard of the restart, on clocks that may run 1% fast).
func recordHold(grace time.Duration) time.Duration {
	return grace - grace/50
}

func dropRestart(dir string) error {
	if err := os.Remove(filepath.Join(dir, restartFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove restart record: %w", err)
	}
	return nil
}

// RestartLeft reports whether the vipd that stopped last left its VIPs in
// place for a restart, and its successor is still due (the record is of
// this boot and before its deadline): `vipd cleanup` then leaves the
// addresses. With drop, it removes the record (cleanup after a failure:
// nothing is to be adopted any more).
func RestartLeft(stateDir string, drop bool) (left time.Duration, err error) {
	_, left, err = loadRestart(stateDir)
	if drop {
		err = errors.Join(err, dropRestart(stateDir))
	}
	return left, err
}

// restartLifetime is the kernel lifetime of an address left for a restart
// in place: the grace in whole seconds, less the second of slack the
// kernel's expiry has, so it is gone by the end of the grace.
func restartLifetime(grace time.Duration) time.Duration {
	return max(grace.Truncate(time.Second)-time.Second, time.Second)
}

// restartBlocked returns why this node cannot restart in place now ("": it
// can). It runs on the loop goroutine.
func (a *Agent) restartBlocked(ctx context.Context) string {
	switch {
	case a.st.fence.Fenced():
		return "fenced: no majority hears this node"
	case a.opts.NextAdopts == nil || !a.opts.NextAdopts():
		return "the vipd that starts next cannot take the VIPs over (a release without restarts in place)"
	}
	for _, m := range a.members.Members() {
		if m.Name != a.self && (m.State == StateAlive || m.State == StateSuspect) && !m.Meta.RestartAware {
			return fmt.Sprintf("member %s runs a release without restarts in place", m.Name)
		}
	}
	for _, v := range a.st.vips {
		if _, ok := v.ann.(Lifetimer); v.held && !ok {
			return fmt.Sprintf("vip %s: its address cannot be left with a lifetime", v.cfg.Name)
		}
	}
	if r, ok := a.backends.(Restarter); ok {
		if ok, why := r.RestartReady(ctx); !ok {
			return why
		}
	}
	return ""
}

// restartInPlace stops this process for a restart in place, if this stop
// is one (Options.StopKind) and nothing stands against it, and reports
// whether it did; otherwise the caller hands off. It runs on the loop
// goroutine, after the loop ended.
func (a *Agent) restartInPlace(ctx context.Context) bool {
	c := a.st.cfg
	grace := c.Cluster.RestartGraceDuration()
	if grace == 0 || a.opts.StopKind == nil {
		return false
	}
	kind := a.opts.StopKind()
	a.log.Info("stopping", "kind", kind)
	if kind != StopRestart {
		return false
	}
	if what := a.finishHandoffs(ctx); what != "" {
		a.log.Warn("restart: handing the VIPs off instead of keeping them", "reason", "a handoff did not finish in time", "vip", what)
		return false
	}
	if why := a.restartBlocked(ctx); why != "" {
		a.log.Warn("restart: handing the VIPs off instead of keeping them", "reason", why)
		return false
	}
	id, now, err := bootClock()
	if err != nil {
		a.log.Warn("restart: handing the VIPs off instead of keeping them", "err", err)
		return false
	}
	// The next process holds on the record's word until 0.98 of the grace:
	// the peers count the grace from when they heard of the restart (after
	// now) on clocks that may run 1% fast.
	rec := restartRecord{Version: RestartProtocol, Node: a.self, BootID: id, DeadlineNs: int64(now + recordHold(grace)), VIPs: []restartVIP{}}
	var held []*vipState
	for _, name := range a.vipNames() {
		if v := a.st.vips[name]; v.held {
			held = append(held, v)
			rec.VIPs = append(rec.VIPs, restartVIP{Name: v.cfg.Name, Address: v.cfg.Addr().String(), Mode: v.cfg.Mode,
				Interface: v.cfg.Interface, Healthy: v.healthy})
		}
	}
	if err := saveRestart(c.StateDir, rec); err != nil {
		a.log.Warn("restart: handing the VIPs off instead of keeping them", "err", err)
		return false
	}
	// From here the VIPs go by themselves by the end of the grace, should
	// no process take them over.
	life := restartLifetime(grace)
	undo := func(why string, err error) bool {
		for _, v := range held {
			if err := a.keepForever(ctx, v); err != nil {
				a.log.Error("restart: lifetime of a VIP kept", "vip", v.cfg.Name, "err", err)
			}
		}
		if err := dropRestart(c.StateDir); err != nil {
			a.log.Warn("restart", "err", err)
		}
		a.st.restartGrace = 0
		a.log.Warn("restart: handing the VIPs off instead of keeping them", "reason", why, "err", err)
		return false
	}
	for _, v := range held {
		actx, cancel := withTimeout(ctx)
		err := v.ann.(Lifetimer).SetLifetime(actx, v.cfg.Addr(), life)
		cancel()
		if err != nil {
			return undo("vip "+v.cfg.Name+": no kernel lifetime", err)
		}
	}
	var alive []string
	for _, m := range a.members.Members() {
		if m.Name != a.self && (m.State == StateAlive || m.State == StateSuspect) {
			alive = append(alive, m.Name)
		}
	}
	actx, cancel := context.WithTimeout(ctx, restartAnnounceTimeout)
	missing := a.lease.AnnounceRestart(actx, grace, alive)
	cancel()
	if len(missing) > 0 {
		return undo(fmt.Sprintf("no answer to the restart from %s", strings.Join(missing, ", ")), nil)
	}
	// Members that join meanwhile learn it from the metadata.
	a.st.restartGrace = grace
	if b, err := a.encodeMeta(a.localMeta()); err == nil {
		a.members.AdvertiseFinal(b, restartAnnounceTimeout)
	}
	if r, ok := a.backends.(Restarter); ok {
		r.Detach()
	}
	if err := a.members.Shutdown(); err != nil {
		a.log.Warn("stop memberlist", "err", err)
	}
	for _, w := range a.st.waiters {
		w.reply <- status.Error(codes.Aborted, "vipd is restarting")
	}
	a.st.waiters = nil
	names := make([]string, 0, len(held))
	for _, v := range held {
		names = append(names, v.cfg.Name)
	}
	a.events.publish(&apipb.Event{Kind: "restart", Node: a.self, Message: fmt.Sprintf("restarting in place: %d VIPs kept for %s", len(held), grace)})
	a.log.Info("stopped for a restart in place: VIPs kept for the next process", "vips", names, "grace", grace, "lifetime", life)
	return true
}

// handoffUnderway names the VIP this node is in the middle of a planned
// handoff of ("": none), as its old holder (handing it off, draining,
// quiescing) or its new one (forwarding the old holder's connections).
func (a *Agent) handoffUnderway() string {
	for _, name := range a.vipNames() {
		v := a.st.vips[name]
		if lifecycle.HandoffUnderway(v.held, v.linger != nil, v.forward != nil, v.handoffStarted, v.drainStarted) {
			return name
		}
	}
	return ""
}

// finishHandoffs lets the planned handoffs under way finish before a
// restart in place, passes running as the loop's would, and returns the
// VIP still in one when time is up ("": none left). Cut short, a handoff
// would move its VIP twice: the quiescing old holder would record the VIP
// as held and its next process take it back (while its quiesce rules go
// with the process and its busy connections are closed), and a forwarding
// new holder's rules would vanish under the old holder's clients.
// Bounded by the longest a forward lasts (a quiesce included) or a
// handoff, whichever is longer.
func (a *Agent) finishHandoffs(ctx context.Context) string {
	what := a.handoffUnderway()
	if what == "" {
		return ""
	}
	limit := max(a.st.cfg.Cluster.HandoffTimeoutDuration(), handoffMax)
	a.log.Info("restart: finishing the handoff under way first", "vip", what, "timeout", limit)
	a.st.finishing = true
	defer func() { a.st.finishing = false }()
	deadline := a.now().Add(limit)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for a.now().Before(deadline) {
		a.reconcile(ctx)
		if what = a.handoffUnderway(); what == "" {
			return ""
		}
		select {
		case <-a.members.Changed():
		case <-a.wake:
		case <-t.C:
		}
	}
	return what
}

// restartAnnounceTimeout bounds the wait for every member's answer to the
// restart.
const restartAnnounceTimeout = 500 * time.Millisecond

// adoption is what this process takes over from the one before it.
type adoption struct {
	vips  map[string]restartVIP
	until time.Time // this process's clock; zero: nothing adopted
}

// readAdoption reads the record the previous process left, if it is good
// for this boot and before its deadline, and removes it: whatever this
// process does not adopt now is the start-up sweep's.
func (a *Agent) readAdoption(c *config.Config) adoption {
	rec, left, err := loadRestart(c.StateDir)
	if err != nil {
		a.log.Warn("restart record", "err", err)
	}
	if err := dropRestart(c.StateDir); err != nil {
		a.log.Warn("restart record", "err", err)
	}
	if left <= 0 || rec.Node != c.NodeName || c.Cluster.RestartGraceDuration() == 0 {
		if len(rec.VIPs) > 0 {
			a.log.Warn("restart record not used: its deadline passed, or it is another boot's or another node's", "vips", len(rec.VIPs))
		}
		return adoption{}
	}
	// A deadline further ahead than this process's grace allows (a buggy
	// or later release's record, a grace lowered meanwhile) is not
	// believed: the peers wait out no more than a grace.
	ad := adoption{vips: map[string]restartVIP{}, until: a.now().Add(min(left, recordHold(c.Cluster.RestartGraceDuration())))}
	for _, rv := range rec.VIPs {
		for _, vc := range c.VIPs {
			if vc.Name == rv.Name && vc.Addr().String() == rv.Address && vc.Mode == rv.Mode && vc.Interface == rv.Interface {
				ad.vips[rv.Name] = rv
			}
		}
	}
	return ad
}

// resumeRoutes are the BGP VIPs of ad, for the speaker to announce before
// its first session is up (bgp.Speaker.Resume).
func (ad adoption) resumeRoutes(c *config.Config) []netip.Addr {
	var out []netip.Addr
	for _, vc := range c.VIPs {
		if _, ok := ad.vips[vc.Name]; ok && vc.Mode == config.ModeBGP {
			out = append(out, vc.Addr())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// adopt takes over the VIPs of ad that are still on this host: held from
// now, with the health they had, and recorded for cleanup. Their addresses
// keep the kernel lifetime the previous process gave them (v.adopted)
// until this process's lease is live and a pass has confirmed it holds
// them (confirmAdopted): this process may wait for its bind address, or
// for peers that do not answer, past the grace the peers wait out, and
// then the addresses go by themselves instead of making a second holder
// (dropAdopted). A VIP no longer there is removed (with the route the BGP
// speaker resumed) and left to the election.
func (a *Agent) adopt(ctx context.Context, ad adoption) {
	for name, rv := range ad.vips {
		v := a.st.vips[name]
		if v == nil {
			continue
		}
		var err error
		if lt, ok := v.ann.(Lifetimer); !ok {
			err = errors.New("its address cannot have a lifetime")
		} else if there, herr := lt.Held(v.cfg.Addr()); herr != nil {
			err = herr
		} else if !there {
			err = errors.New("not on this host")
		}
		if err != nil {
			a.log.Warn("restart: VIP not taken over", "vip", name, "err", err)
			if err := a.withdrawAddr(ctx, v); err != nil {
				a.log.Warn("remove leftover VIP address", "vip", name, "err", err)
			}
			continue
		}
		a.record(v, true)
		v.held, v.adopted = true, true
		v.heldReason = "restart in place"
		v.healthy, v.healthSince = rv.Healthy, a.now()
		a.startWatch(ctx, v)
		a.log.Info("holding VIP", "vip", name, "address", v.cfg.Addr(), "mode", v.cfg.Mode, "reason", "taken over from the previous process (restart in place)")
		a.events.publish(&apipb.Event{Kind: "hold", Vip: name, Node: a.self, Reason: "restart in place"})
	}
}

// dropAdopted gives up the VIPs taken over from the previous process that
// this process may no longer hold on its word: those whose address is gone
// (its lifetime ran out before this process confirmed it), and with late
// (before membership starts: no lease yet) all of them once the record's
// deadline has passed. They are released, not put back: the election
// decides where they go, and the peers may have claimed them meanwhile.
func (a *Agent) dropAdopted(ctx context.Context, late bool) {
	past := !a.now().Before(a.st.adoptUntil)
	for _, name := range a.vipNames() {
		v := a.st.vips[name]
		if !v.adopted || !v.held {
			continue
		}
		why := ""
		if late && past {
			why = "the previous process's deadline passed before this process had a lease"
		} else if there, err := v.ann.(Lifetimer).Held(v.cfg.Addr()); err != nil {
			a.log.Warn("restart: read back a VIP taken over", "vip", name, "err", err)
		} else if !there {
			why = "its address expired before this process's lease confirmed it"
		}
		if why == "" {
			continue
		}
		v.adopted = false
		a.log.Warn("restart: giving up a VIP taken over from the previous process", "vip", name, "reason", why)
		a.release(ctx, v, why)
	}
}

// confirmAdopted ends v's adoption once this process's lease is live (a
// majority acked its heartbeats, or quorum is not required) and this pass
// kept v: its address is made forever again, then read back at the next
// pass as any held VIP's.
func (a *Agent) confirmAdopted(ctx context.Context, v *vipState, d lifecycle.Decision) {
	if !v.adopted {
		return
	}
	if !v.held {
		v.adopted = false
		return
	}
	if ls := a.st.lease; !lifecycle.ConfirmAdoption(d.Do, ls.CanHold(), ls.Adopting(), ls.Evidence()) {
		return
	}
	if err := a.keepForever(ctx, v); err != nil {
		// Gone meanwhile (its lifetime ran out): not put back.
		v.adopted = false
		a.log.Warn("restart: giving up a VIP taken over from the previous process", "vip", v.cfg.Name, "err", err)
		a.release(ctx, v, "its address could not be kept")
		return
	}
	v.adopted = false
	a.st.verifyNow = true
	a.log.Info("restart: VIP taken over confirmed by this process's lease: its address is forever again", "vip", v.cfg.Name)
	if _, ok := v.ann.(Silencer); ok {
		// The previous process's advertisements (the l2 refresh) ended
		// with it: advertise again, now that the address is forever (so
		// Announce leaves it as it is). The MAC did not change: the burst
		// moves no client.
		a.reannounce(ctx, v)
	}
}

// keepForever makes v's address forever again (Lifetimer), if its
// announcer gives addresses lifetimes.
func (a *Agent) keepForever(ctx context.Context, v *vipState) error {
	lt, ok := v.ann.(Lifetimer)
	if !ok {
		return nil
	}
	actx, cancel := withTimeout(ctx)
	defer cancel()
	return lt.SetLifetime(actx, v.cfg.Addr(), 0)
}
