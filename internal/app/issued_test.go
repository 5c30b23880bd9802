package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/certhub/certhub/internal/issued"
)

func TestIssuedFilters(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	e := issued.Entry{Serial: "A1B2", Issuer: issued.ClusterIssuer("platform-ca"), Cluster: "prod-eu", Namespace: "shop", Kind: issued.KindCertificate,
		Name: "web", Names: []string{"web.example.com", "10.0.0.1"}, RecordedAt: now.Add(-time.Hour)}
	for _, tc := range []struct {
		name string
		o    issuedOptions
		want bool
	}{
		{"nothing set", issuedOptions{}, true},
		{"cluster glob", issuedOptions{cluster: "prod-*"}, true},
		{"another cluster", issuedOptions{cluster: "dev"}, false},
		{"namespace and name", issuedOptions{namespace: "shop", name: "w*"}, true},
		{"issuer by name", issuedOptions{issuer: "platform-ca"}, true},
		{"a namespaced Issuer of that name", issuedOptions{issuer: "Issuer/shop/platform-ca"}, false},
		{"serial with colons and case", issuedOptions{serial: "00:a1:b2"}, true},
		{"another serial", issuedOptions{serial: "A1B3"}, false},
		{"dns glob", issuedOptions{dns: "*.example.com"}, true},
		{"dns glob of nothing", issuedOptions{dns: "*.example.org"}, false},
		{"since a duration ago", issuedOptions{since: "2h"}, true},
		{"since a later time", issuedOptions{since: "2026-12-07T11:30:00Z"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.o.matcher(now)
			if err != nil {
				t.Fatal(err)
			}
			if got := m(e); got != tc.want {
				t.Errorf("matched %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := (issuedOptions{since: "yesterday"}).matcher(now); err == nil {
		t.Error("--since yesterday was accepted")
	}
}

func TestIssuedListsTheRecord(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	entry := func(serial string, m int) issued.Entry {
		return issued.Entry{Serial: serial, Issuer: issued.ClusterIssuer("ca"), Cluster: "c1", Namespace: "shop", Kind: issued.KindCertificate,
			Name: "web", Why: "DoesNotExist", RecordedAt: at.Add(time.Duration(m) * time.Minute)}
	}
	data := map[string]string{}
	for _, e := range []issued.Entry{entry("1", 0), entry("2", 1)} { // two first issuances: the first never left
		raw, _ := json.Marshal(e)
		data[e.Key()] = string(raw)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: "certhub-issued-x-0", Labels: map[string]string{issued.RecordLabel: issued.RecordChunk}}, Data: data}
	c := fake.NewClientBuilder().WithObjects(cm).Build()
	var out bytes.Buffer
	if err := runIssued(context.Background(), &out, c, issuedOptions{hubNamespace: "certhub", output: "table"}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "DoesNotExist (UNDELIVERED)") || !strings.Contains(s, "2 of 2 certificates") {
		t.Fatalf("table:\n%s", s)
	}
	out.Reset()
	if err := runIssued(context.Background(), &out, c, issuedOptions{hubNamespace: "certhub", output: "json", serial: "2"}); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 || rows[0]["serial"] != "2" || rows[0]["undelivered"] != nil {
		t.Fatalf("json rows %v (%v):\n%s", rows, err, out.String())
	}
}
