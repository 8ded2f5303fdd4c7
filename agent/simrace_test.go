//go:build race

package agent

// simSeedsDefault is how many seeds plain go test runs: under the race
// detector (make test) a seed costs about 0.4 s of CPU, so few.
const simSeedsDefault = 40
