// Command certhub-demo runs certhub end to end on local control planes (see
// internal/demo). It is a command of its own so that the certhub binary
// links no test machinery.
package main

import (
	"os"

	"github.com/certhub/certhub/internal/demo"
)

func main() {
	if err := demo.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
