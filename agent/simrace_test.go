//go:build race

package agent

// simSeedsDefault is how many seeds plain go test runs: under the race
// detector (make test) a seed costs about 0.5 s of CPU and CI's time is
// tight, so few (make sim runs many, without it).
const simSeedsDefault = 16
