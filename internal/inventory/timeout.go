package inventory

import (
	"context"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// withRequestTimeout bounds every request to a downstream API server but
// watches (which are long by design and end on their own) by d, including
// reading the response body: a server that accepts and never answers, or
// stalls mid-response, costs the caller at most d, never a worker forever.
// A deadline already shorter on the request's context is kept.
func withRequestTimeout(cfg *rest.Config, d time.Duration) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Query().Get("watch") == "true" {
				return rt.RoundTrip(req)
			}
			ctx, cancel := context.WithTimeout(req.Context(), d)
			resp, err := rt.RoundTrip(req.WithContext(ctx))
			if err != nil {
				cancel()
				return nil, err
			}
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		})
	})
}

// cancelOnClose releases the request's timeout when the body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
