//go:build race

package shard

// raceEnabled makes the replica binary a -race build when the test is one.
const raceEnabled = true
