package acme

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// certhubBinary is the certhub binary the replica-process tests run.
var certhubBinary string

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	dir, err := os.MkdirTemp("", "certhub-acme-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	certhubBinary = filepath.Join(dir, "certhub")
	if out, err := exec.Command("go", "build", "-o", certhubBinary, "github.com/certhub/certhub/cmd/certhub").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building certhub: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
