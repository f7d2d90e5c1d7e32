package member

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// newMapper returns a member's REST mapper: controller-runtime's lazy
// mapper, reading the legacy discovery documents so that it learns the
// resources of only the groups the member's clients use. With aggregated
// discovery it would hold the resources of every group the member serves,
// CRDs included, in every member; the price is a request per group
// version used.
func newMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	c := *httpClient
	c.Transport = legacyDiscovery{httpClient.Transport}
	return apiutil.NewDynamicRESTMapper(cfg, &c)
}

// legacyDiscovery asks for the legacy discovery documents where a
// discovery request offers the aggregated ones.
type legacyDiscovery struct{ next http.RoundTripper }

func (l legacyDiscovery) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.Header.Get("Accept"), "apidiscovery.k8s.io") {
		req = req.Clone(req.Context())
		req.Header.Set("Accept", discovery.AcceptV1)
	}
	return l.next.RoundTrip(req)
}
