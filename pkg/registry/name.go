package registry

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// HubName is the name under which the hub itself is engaged. It is the only
// name that is not a DNS-1123 subdomain.
const HubName = ""

// ValidateName reports whether name can name a member. Member names become
// object names and metric label values, so they must be DNS-1123 subdomains.
func ValidateName(name string) error {
	if name == HubName {
		return fmt.Errorf("cluster name must not be empty: the empty name is the hub")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("cluster name %q is not a DNS-1123 subdomain: %s", name, strings.Join(errs, "; "))
	}
	return nil
}
