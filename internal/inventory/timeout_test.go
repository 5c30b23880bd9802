package inventory

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// A server that never answers, or stalls mid-body, costs a request the
// timeout; a watch is left alone.
func TestRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		flush := func() {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		switch r.URL.Path {
		case "/hang":
			<-release
		case "/stall-body":
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("partial"))
			flush()
			<-release
		case "/watch":
			w.WriteHeader(http.StatusOK)
			for range 3 {
				_, _ = w.Write([]byte("event\n"))
				flush()
				time.Sleep(100 * time.Millisecond)
			}
		}
	}))
	defer srv.Close()
	defer close(release)

	cfg := &rest.Config{Host: srv.URL}
	withRequestTimeout(cfg, 50*time.Millisecond)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt}
	get := func(path string) error {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get("/hang"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a server that never answers: %v, want the deadline", err)
	}
	if err := get("/stall-body"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a body that stalls: %v, want the deadline", err)
	}
	if err := get("/watch?watch=true"); err != nil {
		t.Errorf("a watch longer than the timeout was cut: %v", err)
	}
}
