package agent

import (
	"sync"
	"time"

	"github.com/vipd/vipd/agent/apipb"
)

// broker fans events out to subscribers. A subscriber that does not keep up
// loses events rather than slowing the reconcile loop.
type broker struct {
	mu     sync.Mutex
	next   int
	subs   map[int]chan *apipb.Event
	recent []*apipb.Event // the last recentEvents events, oldest first
}

const recentEvents = 256

func newBroker() *broker { return &broker{subs: map[int]chan *apipb.Event{}} }

// subscribe returns the recent events and a channel of the ones to come.
func (b *broker) subscribe() ([]*apipb.Event, <-chan *apipb.Event, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	backlog := append([]*apipb.Event(nil), b.recent...)
	id := b.next
	b.next++
	ch := make(chan *apipb.Event, 64)
	b.subs[id] = ch
	return backlog, ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.subs, id)
	}
}

func (b *broker) publish(e *apipb.Event) {
	if e.UnixNano == 0 {
		e.UnixNano = time.Now().UnixNano()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recent = append(b.recent, e)
	if len(b.recent) > recentEvents {
		b.recent = b.recent[len(b.recent)-recentEvents:]
	}
	for _, ch := range b.subs {
		select {
		case ch <- e:
		default:
		}
	}
}
