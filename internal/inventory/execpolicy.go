package inventory

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Whoever can write a labelled Secret in Argo CD's namespace can name an
// exec credential plugin (execProviderConfig; awsAuthConfig runs
// argocd-k8s-auth) that the hub then runs next to the CA keys. Only the
// commands of Options.ExecPlugins may run (default: argocd-k8s-auth, which
// Argo CD's AWS, GCP and Azure auth use). The registration is refused up
// front with a reason naming the field, and client-go's own plugin policy
// enforces the same list at exec time, on the resolved path.

// DefaultExecPlugins are the exec credential plugins the hub may run.
var DefaultExecPlugins = []string{"argocd-k8s-auth"}

// checkExec refuses an exec plugin that is not on the allow-list: the
// command must resolve (exec.LookPath) to the same file as an entry.
func checkExec(cfg *rest.Config, allowed []string) error {
	if cfg.ExecProvider == nil {
		return nil
	}
	cmd := cfg.ExecProvider.Command
	resolved, err := exec.LookPath(cmd)
	for _, a := range allowed {
		if a == cmd {
			return nil
		}
		if r, aerr := exec.LookPath(a); err == nil && aerr == nil && r == resolved {
			return nil
		}
	}
	return &FieldError{Field: "config.execProviderConfig.command",
		Reason: fmt.Sprintf("runs %q, which is not on the hub's exec plugin allow-list %q (--exec-plugin-allowlist)", cmd, allowed)}
}

// restrictExec makes client-go enforce the allow-list when it runs the plugin.
func restrictExec(cfg *rest.Config, allowed []string) {
	if cfg.ExecProvider == nil {
		return
	}
	p := clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyDenyAll}
	if len(allowed) > 0 {
		p = clientcmdapi.PluginPolicy{PolicyType: clientcmdapi.PluginPolicyAllowlist}
		for _, a := range allowed {
			p.Allowlist = append(p.Allowlist, clientcmdapi.AllowlistEntry{Command: a})
		}
	}
	cfg.ExecProvider.PluginPolicy = p
}

// withinDeadline runs fn, but returns after d (or when ctx ends) even if fn
// does not: client-go runs exec plugins without a context, so a plugin that
// hangs would hold the caller — a worker of every registration — forever.
// fn keeps running in the background until it returns.
func withinDeadline(ctx context.Context, d time.Duration, what string, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%s did not finish within %s (a hung exec credential plugin or server)", what, d)
	case <-ctx.Done():
		return ctx.Err()
	}
}
