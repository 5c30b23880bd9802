// Package shard runs several hub replicas as separate processes against one
// hub and six downstream API servers, and checks the sharding coordinator's
// promises: one owner per cluster, bounded failover after SIGKILL, fast
// handoff after SIGTERM, and no two writers within one fence period.
package shard

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/certhub/certhub/internal/testbed"
)

const (
	issuerName  = "shard-ca"
	downstreams = 6
)

var (
	bed           *testbed.Bed
	certhubBinary string
	hubKubeconfig string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "certhub-shard-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	certhubBinary = filepath.Join(dir, "certhub")
	args := []string{"build", "-o", certhubBinary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/certhub/certhub/cmd/certhub")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: building certhub:", err)
		return 1
	}

	bed, err = testbed.Start(ctx, testbed.Options{Downstreams: downstreams})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: test bed:", err)
		return 1
	}
	defer func() { _ = bed.Stop() }()
	if hubKubeconfig, err = bed.Hub.WriteKubeconfig(dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	if _, err := bed.CreateCAIssuer(ctx, issuerName); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	for _, cp := range bed.Downstreams {
		if _, err := bed.Register(ctx, cp); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
	}
	return m.Run()
}
