package admin

import (
	"net/http"
)

// Region is one peer region of GET /api/regions and of the page: how far
// this process's replication to it is behind (docs/regions.md).
type Region struct {
	// Name is the peer region's name.
	Name string `json:"name"`
	// Lag is the age of the oldest admission not yet acknowledged by the
	// peer, in seconds; 0 when none waits.
	Lag float64 `json:"lag"`
	// Queue is the number of admissions waiting for the peer.
	Queue int `json:"queue"`
	// Dropped counts the admissions a full queue refused.
	Dropped int64 `json:"dropped"`
	// Reachable is whether the peer's last call succeeded.
	Reachable bool `json:"reachable"`
}

// RegionSource is what a Source of a Limiter with regions offers too; the
// page shows its peers beside the routes.
type RegionSource interface {
	Regions() []Region
}

// regions returns the source's peer regions, none without regions.
func (h *handler) regions() []Region {
	if rs, ok := h.src.(RegionSource); ok {
		return rs.Regions()
	}
	return nil
}

func (h *handler) regionsAPI(w http.ResponseWriter, _ *http.Request) {
	out := h.regions()
	if out == nil {
		out = []Region{}
	}
	writeJSON(w, map[string][]Region{"regions": out})
}
