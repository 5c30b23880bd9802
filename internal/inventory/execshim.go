package inventory

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// client-go runs an exec credential plugin with the whole environment of
// the process (the hub's) and without a deadline. With Options.ExecShim set
// (the certhub binary; `certhub run` sets it), the hub runs every plugin
// through `certhub exec-credential`, which gives it a minimal environment
// and kills it, with every process it started, when its time is up: a hung
// plugin neither lingers nor holds anything. client-go's plugin policy then
// allows only the shim; the registration's command was checked against
// Options.ExecPlugins before (checkExec).

// ExecShimCommand is the (hidden) certhub subcommand that runs a plugin.
const ExecShimCommand = "exec-credential"

// execEnvKeep are the variables of the hub's environment a plugin sees:
// the basics, proxies, and the cloud identity argocd-k8s-auth needs (AWS
// IRSA / pod identity, Azure and GCP workload identity). The registration's
// own env entries and client-go's KUBERNETES_EXEC_INFO are kept too.
var (
	execEnvKeep     = []string{"PATH", "HOME", "TMPDIR", "LANG", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", execInfoEnv}
	execEnvPrefixes = []string{"AWS_", "AZURE_", "GOOGLE_", "CLOUDSDK_"}
)

// ExecShimTimeoutExit is the shim's exit code when it killed the plugin
// (timeout(1)'s). client-go reports only the code; shimTimedOut names it.
const ExecShimTimeoutExit = 124

// ExecTimeoutError is RunExecShim's error when the plugin was killed.
type ExecTimeoutError struct {
	Command string
	After   time.Duration
}

func (e *ExecTimeoutError) Error() string {
	return fmt.Sprintf("exec credential plugin %q did not finish within %s: killed", e.Command, e.After)
}

// shimTimedOut rewrites client-go's report of the shim's timeout exit.
func shimTimedOut(err error, c *Cluster, after time.Duration) error {
	if err == nil || c.Config.ExecProvider == nil || !strings.Contains(err.Error(), fmt.Sprintf("failed with exit code %d", ExecShimTimeoutExit)) {
		return err
	}
	return fmt.Errorf("exec credential plugin %q did not finish within %s and was killed: %w", c.Config.ExecProvider.Command, after, err)
}

// execInfoEnv is how client-go hands the plugin its ExecCredential request.
const execInfoEnv = "KUBERNETES_EXEC_INFO"

// shimExec rewrites cfg's exec plugin to run through shim with timeout.
func shimExec(cfg *rest.Config, shim string, timeout time.Duration) {
	e := cfg.ExecProvider
	if e == nil || shim == "" {
		return
	}
	args := []string{ExecShimCommand, "--timeout", timeout.String()}
	for _, v := range e.Env {
		args = append(args, "--keep", v.Name) // names only: values stay out of the process list
	}
	e.Args = append(append(args, "--", e.Command), e.Args...)
	e.Command = shim
}

// RunExecShim is `certhub exec-credential [--timeout D] [--keep NAME]... -- COMMAND [ARG]...`:
// it runs COMMAND with a minimal environment, its stdin, stdout and stderr
// passed through, and kills its process group after D.
func RunExecShim(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(ExecShimCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", DefaultRequestTimeout, "kill the plugin after this long")
	var keep stringList
	fs.Var(&keep, "keep", "an environment variable the plugin sees (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("exec-credential: no plugin command")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Env = minimalEnv(os.Environ(), keep)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec credential plugin %q: %w", fs.Arg(0), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the plugin and whatever it started
		<-done                                              //nolint:errcheck // killed: the exit status says only that
		return &ExecTimeoutError{Command: fs.Arg(0), After: *timeout}
	}
}

// minimalEnv keeps from environ the variables a plugin may see.
func minimalEnv(environ, keep []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		ok := false
		for _, k := range append(keep, execEnvKeep...) {
			ok = ok || name == k
		}
		for _, p := range execEnvPrefixes {
			ok = ok || strings.HasPrefix(name, p)
		}
		if ok {
			out = append(out, kv)
		}
	}
	return out
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
