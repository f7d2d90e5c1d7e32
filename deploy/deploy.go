// Package deploy holds the manifests that deploy fleet-manager on a hub
// (applied with `kubectl apply -k deploy/`) and embeds its CRDs, so that
// the demo and the tests install exactly what a deployment does.
package deploy

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed crd/*.yaml
var crds embed.FS

// CRDs returns the CustomResourceDefinitions in deploy/crd, as
// `make manifests` generated them.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(crds, "crd/fleet.fleetkube.io_*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range files {
		data, err := crds.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}
