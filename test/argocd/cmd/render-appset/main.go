// Command render-appset renders an ApplicationSet with Argo CD's own cluster
// generator and template code (argo-cd/v3 applicationset/generators and
// utils) against cluster Secrets, and prints the Applications as JSON — what
// Argo CD's ApplicationSet controller would create, minus the sync.
//
//	go run ./cmd/render-appset APPLICATIONSET.yaml SECRETS.yaml
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/argoproj/argo-cd/v3/applicationset/generators"
	"github.com/argoproj/argo-cd/v3/applicationset/utils"
	appsv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"
)

// App is the part of a generated Application the tests check.
type App struct {
	Name      string `json:"name"`
	Project   string `json:"project"`
	Server    string `json:"server"`
	Namespace string `json:"namespace,omitempty"`
	RepoURL   string `json:"repoURL"`
	Path      string `json:"path"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: render-appset APPLICATIONSET.yaml SECRETS.yaml")
		os.Exit(2)
	}
	apps, err := render(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "render-appset:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(apps)
}

func render(appsetFile, secretsFile string) ([]App, error) {
	raw, err := os.ReadFile(appsetFile)
	if err != nil {
		return nil, err
	}
	appset := &appsv1.ApplicationSet{}
	if err := yaml.Unmarshal(raw, appset); err != nil {
		return nil, fmt.Errorf("ApplicationSet: %w", err)
	}
	raw, err = os.ReadFile(secretsFile)
	if err != nil {
		return nil, err
	}
	var objs []client.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		s := &corev1.Secret{}
		if err := dec.Decode(s); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("failed to list Secrets: %w", err)
		}
		if s.Name != "" {
			objs = append(objs, s)
		}
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := appsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	gen := generators.NewClusterGenerator(c, appset.Namespace)
	var out []App
	for i := range appset.Spec.Generators {
		g := &appset.Spec.Generators[i]
		params, err := gen.GenerateParams(g, appset, c)
		if err != nil {
			return nil, fmt.Errorf("cluster generator: %w", err)
		}
		m := appset.Spec.Template.ApplicationSetTemplateMeta
		tmpl := &appsv1.Application{
			ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations, Finalizers: m.Finalizers},
			Spec:       appset.Spec.Template.Spec,
		}
		r := utils.Render{}
		for _, p := range params {
			app, err := r.RenderTemplateParams(tmpl, appset.Spec.SyncPolicy, p, appset.Spec.GoTemplate, appset.Spec.GoTemplateOptions)
			if err != nil {
				return nil, fmt.Errorf("template: %w", err)
			}
			a := App{Name: app.Name, Project: app.Spec.Project, Server: app.Spec.Destination.Server, Namespace: app.Spec.Destination.Namespace}
			if src := app.Spec.Source; src != nil {
				a.RepoURL, a.Path = src.RepoURL, src.Path
			}
			out = append(out, a)
		}
	}
	return out, nil
}
