package upgrade

import "time"

// ResultsEnv names the file TestRollingUpgrade writes its Result to, as
// JSON, when set (make bench's part upgrade sets it; lab/bench reads it).
const ResultsEnv = "VIPD_UPGRADE_RESULTS"

// Result is what one run of TestRollingUpgrade measured.
type Result struct {
	// Previous is the previous release's commit (previousRelease), and
	// PreviousVersion and Version what `vipd --version` of it and of this
	// tree print.
	Previous, PreviousVersion, Version string
	// Passes are the upgrade, restart and downgrade passes that ran, in
	// order (fewer when the test stopped early).
	Passes []Pass
	// Duration is the whole test, the previous release's build included.
	Duration time.Duration
	// Failed is set when the test failed (its log says why).
	Failed bool `json:",omitempty"`
}

// Pass is one pass over the three nodes.
type Pass struct {
	// Name is "upgrade", "restart" or "downgrade".
	Name string
	// InPlace: every restart of the pass keeps the VIP where it is.
	InPlace bool
	// Duration is from the first node's step to the last one's end (the
	// cluster agreeing, plus the steady time after it).
	Duration time.Duration
	// Probes the client sent through the VIP in the pass, and how many
	// Failed.
	Probes, Failed int
	// Resets are the failed probes whose connection, open when the VIP
	// moved, was reset by the new holder ("connection reset by peer"):
	// the lab allows one per move, and none in a pass in place.
	Resets int
	// Samples of the VIP's holders (every node read every 20 ms), those
	// with two or more holders, and those with none.
	Samples, TwoHolders, NoHolder int
	// Moves counts changes of the single holder.
	Moves int
	// FirstFailure is the first failed probe ("" when none failed).
	FirstFailure string `json:",omitempty"`
}
