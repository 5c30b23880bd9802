package app

import (
	"fmt"
	"log/slog"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

// defaultMemoryLimitRatio is the share of the container's memory limit the
// Go runtime is asked to stay under (GOMEMLIMIT), leaving the rest for
// what the runtime does not count (cgo, the binary's pages) — the ratio
// Prometheus and automemlimit default to.
const defaultMemoryLimitRatio = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to ratio of the
// cgroup's memory limit (the container's resources.limits.memory), so the
// garbage collector works harder as the limit nears instead of the kernel
// killing the replica when its heap doubles between two collections (a
// replica holds ~0.7 MiB live per owned cluster: docs/benchmarks.md).
// GOMEMLIMIT or AUTOMEMLIMIT in the environment win; ratio 0 leaves the
// runtime alone; no cgroup limit leaves it unlimited.
func setMemoryLimit(ratio float64, log logr.Logger) error {
	if ratio == 0 {
		return nil
	}
	if ratio < 0 || ratio > 1 {
		return fmt.Errorf("--memory-limit-ratio %v: must be in [0, 1]", ratio)
	}
	if _, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithLogger(slog.New(logr.ToSlogHandler(log)))); err != nil {
		// Not fatal: the replica runs as Go would without it.
		log.Error(err, "failed to set the Go memory limit from the cgroup's; running without one")
	}
	return nil
}
