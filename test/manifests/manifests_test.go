// Package manifests builds every kustomization the project ships with the
// kustomize library, so a broken overlay fails `make test`.
package manifests

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/inventory"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func build(t *testing.T, dir string) resmap.ResMap {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("..", "..", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return m
}

func TestHubOverlaysBuild(t *testing.T) {
	for _, dir := range []string{"kustomize/base", "kustomize/overlays/dev", "kustomize/overlays/ha"} {
		t.Run(dir, func(t *testing.T) {
			m := build(t, dir)
			var deployments int
			for _, r := range m.Resources() {
				if r.GetKind() == "Deployment" {
					deployments++
					replicas, err := r.GetFieldValue("spec.replicas")
					if err != nil {
						t.Fatal(err)
					}
					if want := map[bool]int{true: 3, false: 1}[dir == "kustomize/overlays/ha"]; replicas != want {
						t.Errorf("%d replicas, want %d", replicas, want)
					}
					if r.GetNamespace() != "certhub" {
						t.Errorf("Deployment in namespace %q, want certhub", r.GetNamespace())
					}
				}
				if r.GetKind() == "Role" && r.GetName() == "certhub-cluster-secrets" && r.GetNamespace() != "argocd" {
					t.Errorf("cluster-Secret Role moved to namespace %q; it must stay in argocd", r.GetNamespace())
				}
			}
			if deployments != 1 {
				t.Errorf("%d Deployments, want 1", deployments)
			}
		})
	}
}

func TestDownstreamAndExamplesBuild(t *testing.T) {
	for _, dir := range []string{"kustomize/downstream", "kustomize/downstream-namespaced", "examples/clusters/east"} {
		t.Run(dir, func(t *testing.T) {
			if n := build(t, dir).Size(); n == 0 {
				t.Errorf("%s renders nothing", dir)
			}
		})
	}
}

// kustomize/downstream and its namespaced variant grant exactly what the
// hub's code says it needs (cert-manager's own approval grant for external
// issuer mode aside).
func TestDownstreamRBACMatchesTheCode(t *testing.T) {
	for dir, kind := range map[string]string{"kustomize/downstream": "ClusterRole", "kustomize/downstream-namespaced": "Role"} {
		found := false
		for _, r := range build(t, dir).Resources() {
			if r.GetKind() != kind || r.GetName() == "cert-manager-approve-certhub" { // cert-manager's grant, not the hub's
				continue
			}
			raw, err := r.AsYAML()
			if err != nil {
				t.Fatal(err)
			}
			role := &rbacv1.ClusterRole{} // a Role has the same name and rules fields
			if err := yaml.Unmarshal(raw, role); err != nil {
				t.Fatal(err)
			}
			if role.Name != inventory.DownstreamClusterRole || !reflect.DeepEqual(role.Rules, inventory.DownstreamRules()) {
				t.Errorf("%s %s rules\n%+v\ndiffer from inventory.DownstreamRules()\n%+v", dir, role.Name, role.Rules, inventory.DownstreamRules())
			}
			found = true
		}
		if !found {
			t.Errorf("%s has no %s", dir, kind)
		}
	}
}

// The kustomize base deploys the image of the release in VERSION, never "latest".
func TestBaseImageIsTheReleaseVersion(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/certhub/certhub:" + strings.TrimSpace(string(raw))
	for _, r := range build(t, "kustomize/base").Resources() {
		if r.GetKind() != "Deployment" {
			continue
		}
		img, err := r.GetString("spec.template.spec.containers[0].image")
		if err != nil || img != want {
			t.Fatalf("the base deploys image %q (%v), want %q", img, err, want)
		}
		return
	}
	t.Fatal("no Deployment in kustomize/base")
}
