package benchutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/certhub/certhub/test/fixture/fleet"
)

// BuildCertHub builds the certhub binary into dir and returns its path.
func BuildCertHub(dir string) (string, error) {
	bin := filepath.Join(dir, "certhub")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/certhub/certhub/cmd/certhub").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, b)
	}
	return bin, nil
}

// StartReplica starts `bin run --identity id args...`, logging to a file in dir.
func StartReplica(bin, dir, id string, args ...string) (*fleet.Replica, error) {
	return fleet.Launch(id, bin, dir, append([]string{"run", "--identity", id}, args...)...)
}

// Stop sends sig to r and waits for the exit, SIGKILL after 60s.
func Stop(r *fleet.Replica, sig syscall.Signal) {
	if r.StopWithin(sig, 60*time.Second) != nil && r.Running() {
		_ = r.Stop(syscall.SIGKILL)
	}
}
