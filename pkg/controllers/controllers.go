package controllers

import (
	"fmt"
	"slices"
	"strings"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/controllers/tokenrenewal"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// Context is what an initializer adds its controller with.
type Context struct {
	Manager *fleet.Manager
	// Concurrency is how many objects the controller reconciles at once.
	Concurrency int
	// Client is a hub client, reading from the manager's cache, whose
	// user agent names the controller.
	Client client.Client
	// Config is the hub config Client was built from, for the
	// controller's own clients and caches.
	Config *rest.Config
	// Journal is the manager's record of what it owes its members.
	Journal *journal.Journal
	// ClusterProfileNamespace is where the clusterprofile controller
	// publishes. Default: the fleet namespace.
	ClusterProfileNamespace string
	// Credentials are what the tokenrenewal controller publishes of each
	// member's credential, and the membercluster controller shows.
	Credentials *registry.Facts[registry.Credentials]
	// OwedRemovals are the removals the propagation controller publishes
	// as owed by each member, and the membercluster controller shows.
	OwedRemovals *registry.Facts[[]fleetv1alpha1.OwedRemoval]
	// Drains are where the propagation controller publishes each drained
	// member's drain, and the membercluster controller shows.
	Drains *registry.Facts[fleetv1alpha1.DrainStatus]
	// TokenRenewalDisabled keeps the tokenrenewal controller from renewing
	// tokens: it still describes every credential.
	TokenRenewalDisabled bool
	// Tenancy is run's --tenancy, for the propagation controller
	// (propagation.Options.Tenancy): Auto, Enforce or Off ("").
	Tenancy string
}

// Initializer adds one built-in controller to a manager.
type Initializer struct {
	// Name is the controller's name in --controllers and in its
	// --concurrent-<name>-syncs flag.
	Name string
	// OnByDefault says whether "*" enables it.
	OnByDefault bool
	// Concurrency is its default concurrency.
	Concurrency int
	// Add adds the controller.
	Add func(Context) error
}

// Initializers returns the built-in controllers, in the order they start.
func Initializers() []Initializer {
	return []Initializer{
		{
			Name: "membercluster", OnByDefault: true, Concurrency: membercluster.DefaultWorkers,
			Add: func(c Context) error {
				return membercluster.Add(c.Manager, membercluster.Options{Workers: c.Concurrency, Client: c.Client, Credentials: c.Credentials, OwedRemovals: c.OwedRemovals, Drains: c.Drains})
			},
		},
		{
			Name: tokenrenewal.ControllerName, OnByDefault: true, Concurrency: tokenrenewal.DefaultWorkers,
			Add: func(c Context) error {
				return tokenrenewal.Add(c.Manager, tokenrenewal.Options{Workers: c.Concurrency, Client: c.Client, Credentials: c.Credentials, Disabled: c.TokenRenewalDisabled})
			},
		},
		{
			Name: propagation.ControllerName, OnByDefault: true, Concurrency: propagation.DefaultWorkers,
			Add: func(c Context) error {
				return propagation.Add(c.Manager, propagation.Options{Workers: c.Concurrency, Client: c.Client, Config: c.Config, Journal: c.Journal, OwedRemovals: c.OwedRemovals, Drains: c.Drains, Tenancy: c.Tenancy})
			},
		},
		{
			Name: clusterprofile.ControllerName, OnByDefault: false, Concurrency: clusterprofile.DefaultWorkers,
			Add: func(c Context) error {
				return clusterprofile.Add(c.Manager, clusterprofile.Options{Namespace: c.ClusterProfileNamespace, Workers: c.Concurrency, Client: c.Client})
			},
		},
	}
}

// Names returns the names of initializers.
func Names(initializers []Initializer) []string {
	names := make([]string, 0, len(initializers))
	for _, i := range initializers {
		names = append(names, i.Name)
	}
	return names
}

// Enabled reports whether selection, a --controllers list, enables the
// controller name: named, it is on; named with a leading "-", off;
// otherwise on if selection holds "*" and it is on by default.
func Enabled(selection []string, name string, onByDefault bool) bool {
	star := false
	for _, s := range selection {
		switch s {
		case name:
			return true
		case "-" + name:
			return false
		case "*":
			star = true
		}
	}
	return star && onByDefault
}

// Validate refuses a selection that names a controller none of
// initializers is.
func Validate(selection []string, initializers []Initializer) error {
	names := Names(initializers)
	for _, s := range selection {
		if s != "*" && !slices.Contains(names, strings.TrimPrefix(s, "-")) {
			return fmt.Errorf("%q is not a controller: the controllers are %s", s, strings.Join(names, ", "))
		}
	}
	return nil
}

// Settings configure the controllers Start adds.
type Settings struct {
	// Selection is the --controllers list.
	Selection []string
	// Concurrency is each controller's concurrency by name; a controller
	// not in it has its default.
	Concurrency map[string]int
	// Journal is the manager's record of what it owes its members.
	Journal *journal.Journal
	// ClusterProfileNamespace is where the clusterprofile controller
	// publishes. Default: the fleet namespace.
	ClusterProfileNamespace string
	// TokenRenewalDisabled keeps the tokenrenewal controller from renewing
	// tokens (--renew-tokens=false): it still describes every credential.
	TokenRenewalDisabled bool
	// Tenancy is --tenancy: Auto, Enforce or Off ("").
	Tenancy string
}

// Start adds to m each of initializers that s.Selection enables.
func Start(m *fleet.Manager, initializers []Initializer, s Settings) error {
	log := m.GetLogger().WithName("controllers")
	credentials, owedRemovals, drains := tokenrenewal.NewCredentials(), propagation.NewOwedRemovals(), propagation.NewDrains()
	for _, i := range initializers {
		if !Enabled(s.Selection, i.Name, i.OnByDefault) {
			log.Info("Controller disabled", "controller", i.Name)
			continue
		}
		cfg := rest.CopyConfig(m.GetConfig())
		cfg.UserAgent = "fleet-manager/" + i.Name
		cl, err := client.New(cfg, client.Options{
			Scheme: m.GetScheme(), Mapper: m.GetRESTMapper(),
			Cache: &client.CacheOptions{Reader: m.GetCache()},
		})
		if err != nil {
			return fmt.Errorf("building the %s controller's client: %w", i.Name, err)
		}
		c := Context{Manager: m, Concurrency: i.Concurrency, Client: cl, Config: cfg, Journal: s.Journal,
			ClusterProfileNamespace: s.ClusterProfileNamespace, Credentials: credentials, OwedRemovals: owedRemovals, Drains: drains, TokenRenewalDisabled: s.TokenRenewalDisabled, Tenancy: s.Tenancy}
		if n, ok := s.Concurrency[i.Name]; ok && n > 0 {
			c.Concurrency = n
		}
		if err := i.Add(c); err != nil {
			return fmt.Errorf("adding the %s controller: %w", i.Name, err)
		}
		log.V(1).Info("Controller added", "controller", i.Name, "concurrency", c.Concurrency)
	}
	return nil
}
