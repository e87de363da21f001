package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/trident-broker/trident/auth"
)

// Feature flags, as RabbitMQ's management API has them (both for
// administrators only, as RabbitMQ's):
//
//	GET /api/feature-flags                 every flag with its state
//	PUT /api/feature-flags/{name}/enable   enable it in the whole cluster
//
// A flag is "enabled", "disabled" (every member supports it, nobody
// enabled it yet) or "unavailable" (a member does not support it: its
// release is older, or it is not running; missing_on names them).

// FeatureFlags is the node's view of the cluster's feature flags.
type FeatureFlags interface {
	FeatureFlags() []FeatureFlag
	// EnableFeatureFlag enables name in the whole cluster and returns
	// once committed; ErrFeatureFlagUnknown, or an error wrapping
	// ErrFeatureFlagUnsupported that names the members, when it cannot.
	EnableFeatureFlag(ctx context.Context, name string) error
}

// FeatureFlag is one flag of GET /api/feature-flags.
type FeatureFlag struct {
	Name       string   `json:"name"`
	Desc       string   `json:"desc"`
	DocURL     string   `json:"doc_url"`
	Stability  string   `json:"stability"`
	ProvidedBy string   `json:"provided_by"`
	Release    string   `json:"release"` // the release that brought it
	State      string   `json:"state"`
	MissingOn  []string `json:"missing_on,omitempty"` // when unavailable
}

// Errors of FeatureFlags.EnableFeatureFlag.
var (
	ErrFeatureFlagUnknown     = errors.New("web: no such feature flag")
	ErrFeatureFlagUnsupported = errors.New("web: feature flag not supported by every member of the cluster")
)

// enableFlagTimeout bounds an enable's commit.
const enableFlagTimeout = 30 * time.Second

func (s *Server) featureFlagRoutes(m func(string, access, handler)) {
	m("GET /api/feature-flags", accAdministrator, s.listFeatureFlags)
	m("PUT /api/feature-flags/{name}/enable", accAdministrator, s.enableFeatureFlag)
}

func (s *Server) listFeatureFlags(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	out := []FeatureFlag{}
	if s.featureFlags != nil {
		out = append(out, s.featureFlags.FeatureFlags()...)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) enableFeatureFlag(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if _, ok := readBody(w, r); !ok {
		return
	}
	if s.featureFlags == nil {
		notFound(w)
		return
	}
	name := pathValue(r, "name")
	ctx, cancel := context.WithTimeout(r.Context(), enableFlagTimeout)
	defer cancel()
	err := s.featureFlags.EnableFeatureFlag(ctx, name)
	switch {
	case err == nil:
		s.log.Info("feature flag enabled via the API", "flag", name, "by", u.Name())
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrFeatureFlagUnknown):
		writeError(w, http.StatusNotFound, "Object Not Found", err.Error())
	case errors.Is(err, ErrFeatureFlagUnsupported):
		writeError(w, http.StatusConflict, "feature_flag_unsupported", err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	}
}
