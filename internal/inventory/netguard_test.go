package inventory

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCheckServer(t *testing.T) {
	for _, tc := range []struct {
		server          string
		http, linkLocal bool
		want            string // "" allowed
	}{
		{server: "https://api.example.com:6443"},
		{server: "https://127.0.0.1:6443"},
		{server: "https://kubernetes.default.svc"},
		{server: "http://api.example.com", want: "uses plain http"},
		{server: "http://api.example.com", http: true},
		{server: "https://169.254.169.254", want: "refusing to connect to 169.254.169.254"},
		{server: "https://[fd00:ec2::254]", want: "refusing to connect to fd00:ec2::254"},
		{server: "https://[fe80::1]:6443", want: "link-local"},
		{server: "https://[::ffff:169.254.169.254]", want: "refusing"},
		{server: "https://169.254.169.254", linkLocal: true},
	} {
		err := checkServer(tc.server, tc.http, tc.linkLocal)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.server, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want one containing %q", tc.server, err, tc.want)
		case tc.want != "":
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "server" {
				t.Errorf("%s: %v does not name the field server", tc.server, err)
			}
		}
	}
}

// The dialer refuses a metadata address after resolution, without
// connecting; other addresses are dialled as usual.
func TestGuardedDialer(t *testing.T) {
	dial := guardedDialer(time.Second)
	_, err := dial(context.Background(), "tcp", "169.254.169.254:80")
	var refused errMetadataAddress
	if !errors.As(err, &refused) {
		t.Fatalf("dial 169.254.169.254: %v, want refused", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := dial(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial loopback: %v", err)
	}
	c.Close()
}

func TestRedactServer(t *testing.T) {
	if got := redactServer("https://admin:s3cret@api.example.com:6443"); strings.Contains(got, "s3cret") {
		t.Errorf("redactServer kept the password: %s", got)
	}
}

// A body that is not a Kubernetes Status never reaches an Event; messages are
// one bounded line; the error kind survives.
func TestRemoteErrorDropsBodies(t *testing.T) {
	body := "<html>" + strings.Repeat("SECRET-BODY ", 100) + "</html>"
	raw := apierrors.NewGenericServerResponse(500, "GET", schema.GroupResource{}, "", body, 0, true)
	got := remoteError(raw)
	if strings.Contains(got.Error(), "SECRET-BODY") || !strings.Contains(got.Error(), "HTTP 500") {
		t.Errorf("remoteError = %q", got)
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "cert-manager.io", Resource: "certificates"}, "", errors.New(strings.Repeat("x\n", 400)))
	got = remoteError(forbidden)
	if !apierrors.IsForbidden(got) || len(got.Error()) > maxRemoteMessage+8 || strings.Contains(got.Error(), "\n") {
		t.Errorf("remoteError(forbidden) = %q (forbidden %v)", got, apierrors.IsForbidden(got))
	}
}
