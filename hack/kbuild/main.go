// Command kbuild renders a kustomization with sigs.k8s.io/kustomize/api (the
// library behind `kustomize build`), so `make manifests` needs no extra tool.
//
//	go run ./hack/kbuild DIR > out.yaml
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kbuild DIR")
		os.Exit(2)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "kbuild: failed to build %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	out, err := m.AsYaml()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kbuild: failed to render %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	_, _ = os.Stdout.Write(out)
}
