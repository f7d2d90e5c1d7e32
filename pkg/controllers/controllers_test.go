package controllers_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/pkg/controllers"
)

// The package's API server, a hub.
var suite = &fleettest.Suite{}

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

func TestEnabled(t *testing.T) {
	cases := []struct {
		selection   []string
		onByDefault bool
		want        bool
	}{
		{[]string{"*"}, true, true},
		{[]string{"*"}, false, false},
		{[]string{"*", "x"}, false, true},
		{[]string{"*", "-x"}, true, false},
		{[]string{"-x", "*"}, true, false},
		{[]string{"x"}, false, true},
		{[]string{"y"}, true, false},
		{nil, true, false},
	}
	for _, tc := range cases {
		if got := controllers.Enabled(tc.selection, "x", tc.onByDefault); got != tc.want {
			t.Errorf("Enabled(%q, x, onByDefault %t) = %t, want %t", tc.selection, tc.onByDefault, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	table := controllers.Initializers()
	if err := controllers.Validate([]string{"*", "-membercluster"}, table); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if err := controllers.Validate([]string{"*", "-nonesuch"}, table); err == nil || !strings.Contains(err.Error(), "membercluster") {
		t.Errorf("Validate of an unknown name: %v, want an error listing the controllers", err)
	}
}

// TestStartGivesEachControllerItsClient starts a table of two controllers,
// one disabled, and checks the enabled one's client names it to the hub.
func TestStartGivesEachControllerItsClient(t *testing.T) {
	suite.Need(t)
	var mu sync.Mutex
	agents := map[string]bool{}
	cfg := rest.CopyConfig(suite.Hub.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			agents[r.Header.Get("User-Agent")] = true
			mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	m := suite.StartFleet(t, fleettest.FleetOptions{Config: cfg, Deferred: true}).Manager
	var added []controllers.Context
	add := func(c controllers.Context) error { added = append(added, c); return nil }
	table := []controllers.Initializer{
		{Name: "first", OnByDefault: true, Concurrency: 3, Add: add},
		{Name: "second", OnByDefault: true, Concurrency: 3, Add: add},
	}
	if err := controllers.Start(m, table, controllers.Settings{Selection: []string{"*", "-second"}, Concurrency: map[string]int{"first": 7}}); err != nil {
		t.Fatal(err)
	}
	if len(added) != 1 || added[0].Concurrency != 7 {
		t.Fatalf("added %+v, want only the first, with concurrency 7", added)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "controllers-user-agent-"}}
	if err := added[0].Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !agents["fleet-manager/first"] {
		t.Errorf("user agents seen: %v, want fleet-manager/first", agents)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
