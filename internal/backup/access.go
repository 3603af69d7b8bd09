package backup

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Access says whether a backup may read a resource (verb "list" or "get") in a namespace (""
// for a cluster-scoped resource), and if not, why (DESIGN.md section 15: a backup in a team's
// namespace reads only what its requester may read there). err is a failure to find out.
type Access func(ctx context.Context, gr schema.GroupResource, namespace, verb string) (allowed bool, reason string, err error)

// accessKey is one question a run asks its Access.
type accessKey struct {
	gr        schema.GroupResource
	namespace string
	verb      string
}

// accessCache asks a run's Access each question once and remembers the answer; a denial is
// reported once, when it is first learnt.
type accessCache struct {
	access Access
	mu     sync.Mutex
	known  map[accessKey]bool
}

// allowed answers whether the run may read gr in namespace with verb. first is true the one
// time a denial is learnt, with its reason, so that the caller names it once.
func (c *accessCache) allowed(ctx context.Context, gr schema.GroupResource, namespace, verb string) (ok, first bool, reason string, err error) {
	if c == nil || c.access == nil {
		return true, false, "", nil
	}
	key := accessKey{gr: gr, namespace: namespace, verb: verb}
	c.mu.Lock()
	known, seen := c.known[key]
	c.mu.Unlock()
	if seen {
		return known, false, "", nil
	}
	ok, reason, err = c.access(ctx, gr, namespace, verb)
	if err != nil {
		return false, false, "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, raced := c.known[key]; raced {
		return c.known[key], false, "", nil
	}
	if c.known == nil {
		c.known = map[accessKey]bool{}
	}
	c.known[key] = ok
	return ok, !ok, reason, nil
}

// leftOutMessage is the warning that names a resource a backup left out because its requester
// may not read it.
func leftOutMessage(gr schema.GroupResource, namespace, verb, reason string) string {
	where := "cluster-scoped"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	msg := fmt.Sprintf("Left out %s %s: the backup's requester may not %s them", gr, where, verb)
	if reason != "" {
		msg += " (" + reason + ")"
	}
	return msg
}
