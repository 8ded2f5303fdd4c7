package lifecycle

// Kind is what an effect does.
type Kind int

const (
	// InstallForward: forward to the current targets (they changed).
	InstallForward Kind = iota + 1
	// StopForward: stop forwarding (Reason).
	StopForward
	// DropTarget: Member is no longer forwarded to (a TakeOver of its
	// clients follows when this node can reset them). Lost: it is gone
	// (dead, left, forgotten), not ended well.
	DropTarget
	// AddTarget: Member lingers on the VIP: forwarded to from now on.
	AddTarget
	// NoAddress: Member would be forwarded to, but its address is not
	// known: it is not.
	NoAddress
	// EndLinger: the linger is over (its goroutine ended): stop taking the
	// VIP's packets (Reason).
	EndLinger
	// AbandonLinger: close what is left at once, then end (Reason).
	AbandonLinger
	// HurryLinger: close what is left at idle moments now.
	HurryLinger
	// TakeOver: take Member's clients over: reset them once it no longer
	// holds nor lingers on the VIP (ResetClients).
	TakeOver
	// ResetClients: reset the clients of Member's connections that this
	// node does not have itself. Lost: Member did not hand the VIP over on
	// purpose (it did not close its connections itself): those its
	// clients open after its last list are reset too.
	ResetClients
	// ForgetClients: give up the takeover of Member's clients (Reason).
	ForgetClients
)

func (k Kind) String() string {
	return [...]string{"none", "install forward", "stop forward", "drop target", "add target", "no address",
		"end linger", "abandon linger", "hurry linger", "take over", "reset clients", "forget clients"}[k]
}

// Effect is one thing the agent does for a VIP; a step's effects are done
// in the order given.
type Effect struct {
	Kind   Kind
	Member string
	Lost   bool
	Reason string
}
