package salvage

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// RequestInfoHeader is the header the NATS server stamps on a request that
// crossed a service import: the requester's account, and with the
// import's share: true its user.
const RequestInfoHeader = "Nats-Request-Info"

// serviceAccount is the NATS account the service answers in, as the
// server tells (its user-info request), or "" when it does not.
func serviceAccount(nc *nats.Conn) string {
	m, err := nc.Request("$SYS.REQ.USER.INFO", nil, 2*time.Second)
	if err != nil {
		return ""
	}
	var r struct {
		Data struct {
			Account string `json:"account"`
		} `json:"data"`
	}
	if json.Unmarshal(m.Data, &r) != nil {
		return ""
	}
	return r.Data.Account
}

// requestActor is who sent req, as far as the server vouches for it. A
// request from another account that imports salvage.api carries the
// server's stamp (Nats-Request-Info): its account always, its user when
// the import shares it — a name the requester cannot choose. A request
// from the service's own account carries no stamp the server checked (a
// client there could write any header, and could write the records
// themselves): its "by" is recorded as given, unverified.
func (c *Client) requestActor(req micro.Request) Actor {
	a := Actor{Via: ViaService}
	h := req.Headers().Get(RequestInfoHeader)
	if h == "" || c.apiAccount == "" {
		return a
	}
	var info struct {
		Account string `json:"acc"`
		User    string `json:"user"`
	}
	if json.Unmarshal([]byte(h), &info) != nil || info.Account == c.apiAccount {
		return a
	}
	a.Account = info.Account
	if info.User != "" {
		a.Name, a.Verified = info.User, true
	}
	return a
}

// withRequest is ctx for an action req asks for: its actor, and its
// reason when it gives one.
func (c *Client) withRequest(ctx context.Context, req micro.Request) context.Context {
	return context.WithValue(ctx, actorKey{}, c.requestActor(req))
}

// withBy is ctx whose unnamed actor is named by, for an action whose
// method takes no "by" (LimitRemove).
func withBy(ctx context.Context, by string) context.Context {
	a, _ := ctx.Value(actorKey{}).(Actor)
	if a.Name != "" || by == "" {
		return ctx
	}
	a.Name = by
	return context.WithValue(ctx, actorKey{}, a)
}
