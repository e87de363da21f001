package shovel

import (
	"strings"
)

// The record prefixes of the components the manager runs: shovels, and
// MQTT bridges (which share the shovels' storage, placement, workers and
// state reporting; bridge*.go).
const (
	recordPrefix       = "shovel/"
	bridgeRecordPrefix = "mqtt-bridge/"
)

var recordPrefixes = [...]string{recordPrefix, bridgeRecordPrefix}

// ReplicatedKey reports whether a metadata record is a shovel or bridge
// definition: cluster-wide.
func ReplicatedKey(key string) bool {
	return strings.HasPrefix(key, recordPrefix) || strings.HasPrefix(key, bridgeRecordPrefix)
}

func recordKey(vhost, name string) string { return recordPrefix + vhost + "\x00" + name }

// componentKey is the record key of a definition of component.
func componentKey(component, vhost, name string) string {
	if component == ComponentMQTTBridge {
		return bridgeRecordPrefix + vhost + "\x00" + name
	}
	return recordKey(vhost, name)
}

type record struct {
	// Component is ComponentMQTTBridge for a bridge; "" (a record written
	// before bridges existed) or ComponentShovel for a shovel.
	Component string         `json:"component,omitempty"`
	VHost     string         `json:"vhost"`
	Name      string         `json:"name"`
	User      string         `json:"user"`
	Value     map[string]any `json:"value"`
}

func (r *record) component() string {
	if r.Component == "" {
		return ComponentShovel
	}
	return r.Component
}

func (r *record) key() string { return componentKey(r.component(), r.VHost, r.Name) }

// ApplyMeta takes the shovel records committed by the cluster (every
// node's, this one's included) and starts, replaces or stops shovels to
// match. It runs on the metadata group's apply goroutine: it never waits
// for a shovel to stop (that happens on a goroutine of its own).
func (m *Manager) ApplyMeta(ops []MetaOp) error {
	for _, op := range ops {
		if !ReplicatedKey(op.Key) && !(op.Prefix && (strings.HasPrefix(recordPrefix, op.Key) || strings.HasPrefix(bridgeRecordPrefix, op.Key))) {
			continue
		}
		switch {
		case op.Prefix:
			m.mu.Lock()
			var keys []string
			for k, sd := range m.defs {
				if strings.HasPrefix(k, op.Key) && !sd.static {
					keys = append(keys, k)
				}
			}
			m.mu.Unlock()
			for _, k := range keys {
				go m.remove(k)
			}
		case op.Val == nil:
			go m.remove(op.Key)
		default:
			data := append([]byte(nil), op.Val...)
			go m.replace(data)
		}
	}
	return nil
}

// MetaOp is a committed metadata record as the cluster applies it
// (exchange.MetaOp's fields: a put, a delete, or a prefix delete).
type MetaOp struct {
	Key    string
	Val    []byte
	Prefix bool
}
