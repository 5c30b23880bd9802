package inventory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestCheckExecAndPolicy(t *testing.T) {
	dir := t.TempDir()
	allowed := filepath.Join(dir, "get-token")
	other := filepath.Join(t.TempDir(), "get-token") // same name, another file
	for _, p := range []string{allowed, other} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	list := []string{"argocd-k8s-auth", allowed}
	cfg := func(cmd string) *rest.Config {
		return &rest.Config{ExecProvider: &clientcmdapi.ExecConfig{Command: cmd}}
	}
	if err := checkExec(&rest.Config{}, list); err != nil {
		t.Errorf("no exec plugin: %v", err)
	}
	if err := checkExec(cfg(allowed), list); err != nil {
		t.Errorf("allowed plugin refused: %v", err)
	}
	if err := checkExec(cfg("argocd-k8s-auth"), list); err != nil {
		t.Errorf("argocd-k8s-auth (as Argo CD's AWS auth names it) refused: %v", err)
	}
	var fe *FieldError
	if err := checkExec(cfg(other), list); !errors.As(err, &fe) || fe.Field != "config.execProviderConfig.command" {
		t.Errorf("a plugin of the same name elsewhere: %v, want refused naming the field", err)
	}
	if err := checkExec(cfg(allowed), []string{}); err == nil {
		t.Errorf("an empty allow-list must allow nothing")
	}
	c := cfg(allowed)
	restrictExec(c, list)
	if p := c.ExecProvider.PluginPolicy; p.PolicyType != clientcmdapi.PluginPolicyAllowlist || len(p.Allowlist) != 2 {
		t.Errorf("client-go policy %+v", p)
	}
	restrictExec(c, nil)
	if c.ExecProvider.PluginPolicy.PolicyType != clientcmdapi.PluginPolicyDenyAll {
		t.Errorf("empty list: policy %+v, want DenyAll", c.ExecProvider.PluginPolicy)
	}
}

func TestWithinDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	err := withinDeadline(context.Background(), 20*time.Millisecond, "probe", func() error { <-release; return nil })
	if err == nil || !strings.Contains(err.Error(), "did not finish within 20ms") {
		t.Errorf("hung: %v", err)
	}
	want := errors.New("x")
	if err := withinDeadline(context.Background(), time.Second, "probe", func() error { return want }); !errors.Is(err, want) {
		t.Errorf("returned: %v", err)
	}
}
