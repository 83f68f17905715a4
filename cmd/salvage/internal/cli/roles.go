package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// roleDashboard serves the dashboard, /api, /metrics and /healthz: a role
// of the salvage binary, next to the client's own roles.
const roleDashboard = "dashboard"

// roleAll is every role.
const roleAll = "all"

// resolveRoles expands --role values (comma-separated or repeated, "all")
// into the client's roles and whether the dashboard runs.
func resolveRoles(values []string) ([]salvage.Role, bool, error) {
	if len(values) == 0 {
		values = []string{roleAll}
	}
	var roles []salvage.Role
	dash := false
	names := func() string {
		var n []string
		for _, r := range salvage.RolesAll {
			n = append(n, string(r))
		}
		return strings.Join(append(n, roleDashboard), ", ")
	}
	for _, v := range values {
		for _, r := range strings.Split(v, ",") {
			switch r = strings.TrimSpace(r); {
			case r == roleAll:
				roles, dash = append(roles, salvage.RolesAll...), true
			case r == roleDashboard:
				dash = true
			case slices.Contains(salvage.RolesAll, salvage.Role(r)):
				roles = append(roles, salvage.Role(r))
			default:
				return nil, false, fmt.Errorf("unknown role %q (want %s or %s)", r, names(), roleAll)
			}
		}
	}
	slices.Sort(roles)
	return slices.Compact(roles), dash, nil
}

// pipelines are the built-in pipelines. Without a sim URL contract-review
// calls an in-process simulated model and order-fulfillment is not
// available; with one, both call the `salvage sim` process there.
func pipelines(model simmodel.Config, simURL string, simTimeout time.Duration) ([]*salvage.Pipeline, error) {
	if simURL == "" {
		m, err := simmodel.New(model)
		if err != nil {
			return nil, err
		}
		return []*salvage.Pipeline{contractreview.New(m)}, nil
	}
	c := &sim.Client{BaseURL: simURL, Timeout: simTimeout}
	return []*salvage.Pipeline{contractreview.New(c), orders.New(c)}, nil
}
