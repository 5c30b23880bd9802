package inventory

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestShimExecRewritesThePlugin(t *testing.T) {
	cfg := &rest.Config{ExecProvider: &clientcmdapi.ExecConfig{Command: "argocd-k8s-auth", Args: []string{"aws", "--cluster-name", "prod"},
		Env: []clientcmdapi.ExecEnvVar{{Name: "AWS_PROFILE", Value: "secret-profile"}}}}
	shimExec(cfg, "/usr/local/bin/certhub", 30*time.Second)
	e := cfg.ExecProvider
	want := []string{ExecShimCommand, "--timeout", "30s", "--keep", "AWS_PROFILE", "--", "argocd-k8s-auth", "aws", "--cluster-name", "prod"}
	if e.Command != "/usr/local/bin/certhub" || !reflect.DeepEqual(e.Args, want) {
		t.Errorf("got %s %q, want the shim with %q", e.Command, e.Args, want)
	}
	if len(e.Env) != 1 || e.Env[0].Value != "secret-profile" {
		t.Errorf("env %v: values must stay in the environment, not the arguments", e.Env)
	}
	noExec := &rest.Config{}
	shimExec(noExec, "/usr/local/bin/certhub", time.Second)
	if noExec.ExecProvider != nil {
		t.Error("a config without a plugin got one")
	}
}

func TestExecShimGivesAMinimalEnvironment(t *testing.T) {
	t.Setenv("CERTHUB_HUB_SECRET", "hub-only")
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/hub")
	t.Setenv("PLUGIN_SETTING", "from-the-registration")
	t.Setenv(execInfoEnv, `{"kind":"ExecCredential"}`)
	out := &bytes.Buffer{}
	if err := RunExecShim(context.Background(), []string{"--keep", "PLUGIN_SETTING", "--", "/bin/sh", "-c", "env"}, nil, out, os.Stderr); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"PATH=", "AWS_ROLE_ARN=arn:aws:iam::1:role/hub", "PLUGIN_SETTING=from-the-registration", execInfoEnv + "="} {
		if !strings.Contains(got, want) {
			t.Errorf("the plugin's environment lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "CERTHUB_HUB_SECRET") {
		t.Errorf("the plugin saw the hub's environment:\n%s", got)
	}
}

func TestExecShimKillsAHungPluginAndWhatItStarted(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The plugin starts a child and waits: both must be gone.
	err := RunExecShim(context.Background(), []string{"--timeout", "300ms", "--", "/bin/sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}, nil, os.Stdout, os.Stderr)
	if err == nil || !strings.Contains(err.Error(), "did not finish within 300ms: killed") {
		t.Fatalf("err = %v, want the timeout named", err)
	}
	raw, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	gone := func(context.Context) (bool, error) { return syscall.Kill(pid, 0) == syscall.ESRCH, nil }
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, gone); err != nil {
		t.Fatalf("the plugin's child %d still runs", pid)
	}
}

func TestExecShimPassesTheResultAndTheExitCode(t *testing.T) {
	out := &bytes.Buffer{}
	if err := RunExecShim(context.Background(), []string{"--", "/bin/sh", "-c", "cat"}, strings.NewReader("token"), out, os.Stderr); err != nil || out.String() != "token" {
		t.Errorf("got %q, %v; want stdin passed through", out, err)
	}
	if err := RunExecShim(context.Background(), []string{"--", "/bin/sh", "-c", "exit 3"}, nil, out, os.Stderr); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("err = %v, want the plugin's exit status", err)
	}
	if err := RunExecShim(context.Background(), nil, nil, out, os.Stderr); err == nil {
		t.Error("no command accepted")
	}
}

// client-go reports only the shim's exit code; the hub names the timeout.
func TestShimTimeoutIsNamed(t *testing.T) {
	c := &Cluster{Config: &rest.Config{ExecProvider: &clientcmdapi.ExecConfig{Command: "argocd-k8s-auth"}}}
	err := shimTimedOut(errors.New("getting credentials: exec: executable /bin/certhub failed with exit code 124"), c, 30*time.Second)
	if want := `exec credential plugin "argocd-k8s-auth" did not finish within 30s and was killed`; !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %s", err, want)
	}
	other := errors.New("getting credentials: exec: executable /bin/certhub failed with exit code 1")
	if got := shimTimedOut(other, c, time.Second); !errors.Is(got, other) || got.Error() != other.Error() {
		t.Errorf("another exit code was rewritten: %v", got)
	}
}
