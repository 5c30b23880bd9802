// Command gen writes certhub's Grafana dashboard (test/dashboard) as JSON
// to stdout: `make dashboard` puts it in examples/grafana-dashboard.json.
package main

import (
	"fmt"
	"os"

	"github.com/certhub/certhub/test/dashboard"
)

func main() {
	raw, err := dashboard.JSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	_, _ = os.Stdout.Write(raw)
}
