// Command certhub is the multicluster certificate hub. See internal/app.
package main

import (
	"os"

	"github.com/certhub/certhub/internal/app"
)

func main() {
	if err := app.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
