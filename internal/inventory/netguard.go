package inventory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Whoever can write a labelled Secret in Argo CD's namespace chooses where
// the hub connects, with the hub's network position. Two destinations are
// refused by default (Options.AllowPlainHTTP, Options.AllowLinkLocal):
//
//   - plain http:// servers: the hub would send the registration's
//     credentials in clear, and trust whatever answers;
//   - link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10,
//     AWS's fd00:ec2::254): from a hub in a cloud VM they hand out the
//     node's credentials. They are checked on the address actually dialled
//     (after DNS), so a name that resolves there is refused too.

// metadataPrefixes are the destinations refused unless AllowLinkLocal.
var metadataPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
}

// errMetadataAddress is returned for a dial to a refused address.
type errMetadataAddress struct{ addr netip.Addr }

func (e errMetadataAddress) Error() string {
	return fmt.Sprintf("refusing to connect to %s: link-local and cloud metadata addresses are refused (--allow-link-local-clusters allows them)", e.addr)
}

// refusedAddr reports whether addr is a link-local or metadata address.
func refusedAddr(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range metadataPrefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// checkServer refuses, before anything is dialled, what the registration
// states outright: plain http, or a literal refused address.
func checkServer(server string, allowHTTP, allowLinkLocal bool) error {
	u, err := url.Parse(server)
	if err != nil {
		return &FieldError{Field: keyServer, Reason: "is not a URL", Err: err}
	}
	if u.Scheme == "http" && !allowHTTP {
		return &FieldError{Field: keyServer, Reason: "uses plain http: credentials would cross the network in clear (--allow-plain-http-clusters allows it)"}
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && !allowLinkLocal && refusedAddr(a) {
		return &FieldError{Field: keyServer, Reason: errMetadataAddress{a}.Error()}
	}
	return nil
}

// guardedDialer dials like net.Dialer but refuses refused addresses, after
// name resolution, before connecting.
func guardedDialer(timeout time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if a, err := netip.ParseAddr(host); err == nil && refusedAddr(a) {
			return errMetadataAddress{a}
		}
		return nil
	}}
	return d.DialContext
}

// redactServer is server with any password in it replaced by "xxxxx", for
// logs and Events.
func redactServer(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return "<unparseable URL>"
	}
	return u.Redacted()
}

// maxRemoteMessage bounds what a downstream API server's answer may put
// into a hub Event or log line.
const maxRemoteMessage = 256

// remoteError is err as it may be shown in the hub (Events, logs): a
// response that is not a Kubernetes Status (an HTML page, anything a
// hostile or misdirected server sends) is reduced to its HTTP code, and any
// message is cut to maxRemoteMessage on one line. It keeps the API error
// kind (apierrors.IsForbidden ...).
func remoteError(err error) error {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return errors.New(oneLine(err.Error()))
	}
	st := se.Status()
	msg := st.Message
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Type == metav1.CauseTypeUnexpectedServerResponse {
				msg = fmt.Sprintf("the server answered HTTP %d with a body that is not a Kubernetes Status (not shown)", st.Code)
			}
		}
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: st.Status, Code: st.Code, Reason: st.Reason, Message: oneLine(msg)}}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxRemoteMessage {
		s = s[:maxRemoteMessage] + "…"
	}
	return s
}
