//go:build !race

package agent

// simSeedsDefault is how many seeds plain go test runs without the race
// detector (about 0.09 s of CPU a seed; make sim runs more).
const simSeedsDefault = 200
