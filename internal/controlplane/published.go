package controlplane

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// published are the kinds a manager writes for others to read on the hub:
// its records, its status and its Events.
var published = []schema.GroupVersionKind{
	{Group: "fleet.fleetkube.io", Version: "v1alpha1", Kind: "MemberCluster"},
	{Group: "fleet.fleetkube.io", Version: "v1alpha1", Kind: "Propagation"},
	{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Kind: "ClusterProfile"},
	{Version: "v1", Kind: "Event"},
	{Group: "events.k8s.io", Version: "v1", Kind: "Event"},
}

// FindPublishedCredential reads every object of the published kinds on the
// API server cfg points at, in every namespace, and returns the first
// that holds any of secrets, as is or base64-encoded, named with the
// secret's first characters; "" when none does. A kind the server does
// not serve is skipped.
func FindPublishedCredential(ctx context.Context, cfg *rest.Config, secrets []string) (string, error) {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return "", err
	}
	var needles []string
	for _, s := range secrets {
		needles = append(needles, s, base64.StdEncoding.EncodeToString([]byte(s)))
	}
	for _, gvk := range published {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, list); meta.IsNoMatchError(err) {
			continue
		} else if err != nil {
			return "", fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for _, obj := range list.Items {
			raw, err := json.Marshal(obj.Object)
			if err != nil {
				return "", err
			}
			for _, needle := range needles {
				if needle != "" && strings.Contains(string(raw), needle) {
					return fmt.Sprintf("%s %s/%s holds credential material starting %.4q", gvk.Kind, obj.GetNamespace(), obj.GetName(), needle), nil
				}
			}
		}
	}
	return "", nil
}
