package operator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/chatmodel"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/orders"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// RoleDashboard serves the dashboard, /api, /metrics and /healthz: a role
// of the salvage binary, next to the client's own roles.
const RoleDashboard = "dashboard"

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
		for _, r := range salvage.AllRoles() {
			n = append(n, string(r))
		}
		return strings.Join(append(n, RoleDashboard), ", ")
	}
	for _, v := range values {
		for _, r := range strings.Split(v, ",") {
			switch r = strings.TrimSpace(r); {
			case r == roleAll:
				roles, dash = append(roles, salvage.AllRoles()...), true
			case r == RoleDashboard:
				dash = true
			case slices.Contains(salvage.AllRoles(), salvage.Role(r)):
				roles = append(roles, salvage.Role(r))
			default:
				return nil, false, fmt.Errorf("unknown role %q (want %s or %s)", r, names(), roleAll)
			}
		}
	}
	if len(roles) == 0 {
		// The dashboard alone: the client provisions and runs nothing.
		roles = []salvage.Role{salvage.RoleNone}
	}
	slices.Sort(roles)
	return slices.Compact(roles), dash, nil
}

// modelFlags say which model contract-review calls.
type modelFlags struct {
	api     string
	URL     string
	name    string
	timeout time.Duration
	// fallbacks are MODEL or MODEL=URL: models a call goes to, in order,
	// when the one before is rate-limited, overloaded or its breaker open.
	fallbacks []string
}

// pipelines are the built-in pipelines. contract-review calls the model at
// --model-url through chatmodel.New (--model-api: OpenAI's chat
// completions or Anthropic's Messages); without one, the `salvage sim` at
// simURL through that same client; without either, the simulated model in
// process. order-fulfillment needs the sim.
func pipelines(model simmodel.Config, mf modelFlags, simURL string, simTimeout time.Duration) ([]*salvage.Pipeline, error) {
	var tool salvage.Tool
	var err error
	switch {
	case mf.URL != "":
		tool, err = chatmodel.New(contractreview.ModelTool, chatmodel.Config{API: chatmodel.API(mf.api), BaseURL: mf.URL, Model: mf.name, Timeout: mf.timeout})
	case simURL != "":
		tool, err = chatmodel.New(contractreview.ModelTool, chatmodel.Config{API: chatmodel.API(mf.api), BaseURL: strings.TrimSuffix(simURL, "/") + "/v1", Model: simmodel.ModelName, Timeout: simTimeout})
	default:
		var m *simmodel.Model
		if m, err = simmodel.New(model); err == nil {
			tool = m.Tool(contractreview.ModelTool)
		}
	}
	if err != nil {
		return nil, err
	}
	base, timeout := mf.URL, mf.timeout
	if base == "" && simURL != "" {
		base, timeout = strings.TrimSuffix(simURL, "/")+"/v1", simTimeout
	}
	var fallbacks []salvage.Tool
	for _, f := range mf.fallbacks {
		name, url, _ := strings.Cut(f, "=")
		if url == "" {
			url = base
		}
		if name == "" || url == "" {
			return nil, fmt.Errorf("--model-fallback %q: want MODEL or MODEL=URL (a model at --model-url, or the sim's, unless URL names another)", f)
		}
		ft, err := chatmodel.New("fallback", chatmodel.Config{API: chatmodel.API(mf.api), BaseURL: url, Model: name, Timeout: timeout})
		if err != nil {
			return nil, err
		}
		fallbacks = append(fallbacks, ft)
	}
	out := []*salvage.Pipeline{contractreview.New(tool, fallbacks...)}
	if simURL != "" {
		out = append(out, orders.New(&sim.Client{BaseURL: simURL, Timeout: simTimeout}))
	}
	return out, nil
}
