//go:build !race

package agent

// simSeedsDefault is how many seeds plain go test runs without the race
// detector (about 0.06 s of CPU a seed; make sim-ci runs 10,000, make
// sim any number).
const simSeedsDefault = 200
