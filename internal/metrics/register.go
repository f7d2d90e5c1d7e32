package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c with reg. When a collector of the same type is
// already registered there in its place, as when several managers share
// controller-runtime's global registry in one process, *c becomes that
// one, so that both write the same series.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return fmt.Errorf("registering metrics: %w", err)
}
