package node

import "github.com/trident-broker/trident/web"

// EachCounters gives the management API's rate sampler each connection's
// counters (web.CounterSource): through a front end's own EachCounters
// where it has one (MQTT, whose idle devices then cost the sampler no
// allocation), else from its connection list.
func (c connections) EachCounters(fn func(*web.ConnCounters)) {
	if c.n.amqp != nil {
		for _, i := range c.n.amqp.Connections() {
			cc := web.ConnCounters{Name: i.Name, RecvOct: i.RecvOct, SendOct: i.SendOct, Published: i.Published,
				Delivered: i.Delivered, ChannelList: make([]web.ChannelInfo, len(i.ChannelList))}
			for k, ch := range i.ChannelList {
				cc.ChannelList[k] = web.ChannelInfo(ch)
			}
			fn(&cc)
		}
	}
	for _, f := range c.n.frontEnds {
		if src, ok := f.(web.CounterSource); ok {
			src.EachCounters(fn)
			continue
		}
		for _, ci := range f.ListConnections() {
			fn(&web.ConnCounters{Name: ci.Name, RecvOct: ci.RecvOct, SendOct: ci.SendOct, Published: ci.Published,
				Delivered: ci.Delivered, ChannelList: ci.ChannelList})
		}
	}
}

// EachCounters is the MQTT front end's web.CounterSource.
func (f *mqttFrontEnd) EachCounters(fn func(*web.ConnCounters)) {
	var cc web.ConnCounters
	f.srv.EachCounters(func(name string, recvBytes, sentBytes, recvPublish, sentPublish uint64) {
		cc = web.ConnCounters{Name: name, RecvOct: recvBytes, SendOct: sentBytes, Published: recvPublish, Delivered: sentPublish}
		fn(&cc)
	})
}
