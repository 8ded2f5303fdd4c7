package membership

// State is a member's liveness as membership sees it.
type State int

// Member states.
const (
	Alive State = iota
	Suspect
	Dead
	Left
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return "unknown"
}

// Usable reports whether a member in state s may take part in the
// election: alive, or suspect (not yet declared dead).
func (s State) Usable() bool { return s == Alive || s == Suspect }
