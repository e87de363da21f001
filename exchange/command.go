package exchange

// Typed topology commands and the one permission check.
//
// Every front end that changes topology for a user (AMQP, STOMP, the HTTP
// API) builds one of the commands below and runs it with VHost.Do, giving
// the identity it acts for as an Authorizer. Do asks Authorize first, and
// Authorize derives every permission the command needs from the command
// itself, arguments included: a dead-letter exchange named in a queue's
// arguments, an alternate exchange named in an exchange's arguments. So no
// front end decides a permission, and none can forget one (issue 38, F4 and
// F6). The rules are RabbitMQ's (rabbit_channel.erl):
//
//	queue.declare        configure on the queue (the generated name for a
//	                     server-named queue); with x-dead-letter-exchange:
//	                     read on the queue and write on that exchange
//	exchange.declare     configure on the exchange; with alternate-exchange:
//	                     read on the exchange and write on that exchange
//	queue.bind/unbind    write on the queue, read on the source exchange
//	exchange.bind/unbind write on the destination, read on the source
//	queue.delete         configure on the queue
//	exchange.delete      configure on the exchange
//	queue.purge          read on the queue
//
// Passive declarations need no permission (as in RabbitMQ). The default
// exchange "" is checked under the name the Authorizer gives it
// ("amq.default").

// Resource kinds as permissions name them.
const (
	ResourceQueue    = "queue"
	ResourceExchange = "exchange"
)

// Authorizer is the identity a command acts for: each method returns nil if
// it may configure, write or read the named resource of kind
// (ResourceQueue, ResourceExchange) in vhost, else the refusal (which the
// front end maps to its protocol's access-refused error). auth.Actor
// implements it for a user.
type Authorizer interface {
	CheckConfigure(vhost, kind, name string) error
	CheckWrite(vhost, kind, name string) error
	CheckRead(vhost, kind, name string) error
}

// Command is a typed topology command: one of QueueDeclare, ExchangeDeclare,
// QueueBind, QueueUnbind, ExchangeBind, ExchangeUnbind, QueueDelete,
// ExchangeDelete, QueuePurge.
type Command interface {
	authorize(a Authorizer, vhost string) error
}

// QueueDeclare declares a queue (Name "" for a server-named one).
type QueueDeclare struct {
	Name string
	Opts QueueOpts
}

// ExchangeDeclare declares an exchange of Type.
type ExchangeDeclare struct {
	Name, Type string
	Opts       ExchangeOpts
}

// QueueBind binds Queue to Exchange with Key and Args; Owner is the
// connection (exclusive queues are only its own).
type QueueBind struct {
	Queue, Exchange, Key string
	Args                 Table
	Owner                any
}

// QueueUnbind removes a QueueBind's binding.
type QueueUnbind QueueBind

// ExchangeBind binds exchange Destination to exchange Source.
type ExchangeBind struct {
	Destination, Source, Key string
	Args                     Table
}

// ExchangeUnbind removes an ExchangeBind's binding.
type ExchangeUnbind ExchangeBind

// QueueDelete deletes a queue.
type QueueDelete struct {
	Name              string
	IfUnused, IfEmpty bool
	Owner             any
}

// ExchangeDelete deletes an exchange.
type ExchangeDelete struct {
	Name     string
	IfUnused bool
}

// QueuePurge removes a queue's ready messages.
type QueuePurge struct {
	Name  string
	Owner any
}

// Result answers a command: the declared queue for QueueDeclare, the
// number of messages removed for QueueDelete and QueuePurge.
type Result struct {
	Queue   QueueInfo
	Count   int
	Created bool // a policy.set command: the policy is new
}

// Authorize is the one permission check of a topology command: nil if a
// may do everything c needs in vhost, else the first refusal.
func Authorize(a Authorizer, vhost string, c Command) error {
	if a == nil {
		return errorf(KindAccessRefused, "no identity to act for")
	}
	return c.authorize(a, vhost)
}

func (c QueueDeclare) authorize(a Authorizer, vhost string) error {
	if c.Opts.Passive {
		return nil
	}
	if err := a.CheckConfigure(vhost, ResourceQueue, c.Name); err != nil {
		return err
	}
	dlx, ok := c.Opts.Args["x-dead-letter-exchange"].(string)
	if !ok {
		return nil // absent, or not a string: the declaration refuses it
	}
	if err := a.CheckRead(vhost, ResourceQueue, c.Name); err != nil {
		return err
	}
	return a.CheckWrite(vhost, ResourceExchange, dlx)
}

func (c ExchangeDeclare) authorize(a Authorizer, vhost string) error {
	if c.Opts.Passive {
		return nil
	}
	if err := a.CheckConfigure(vhost, ResourceExchange, c.Name); err != nil {
		return err
	}
	ae, ok := c.Opts.Args["alternate-exchange"].(string)
	if !ok {
		return nil
	}
	if err := a.CheckRead(vhost, ResourceExchange, c.Name); err != nil {
		return err
	}
	return a.CheckWrite(vhost, ResourceExchange, ae)
}

func bindAuthorize(a Authorizer, vhost, dstKind, dst, src string) error {
	if err := a.CheckWrite(vhost, dstKind, dst); err != nil {
		return err
	}
	return a.CheckRead(vhost, ResourceExchange, src)
}

func (c QueueBind) authorize(a Authorizer, vhost string) error {
	return bindAuthorize(a, vhost, ResourceQueue, c.Queue, c.Exchange)
}

func (c QueueUnbind) authorize(a Authorizer, vhost string) error {
	return bindAuthorize(a, vhost, ResourceQueue, c.Queue, c.Exchange)
}

func (c ExchangeBind) authorize(a Authorizer, vhost string) error {
	return bindAuthorize(a, vhost, ResourceExchange, c.Destination, c.Source)
}

func (c ExchangeUnbind) authorize(a Authorizer, vhost string) error {
	return bindAuthorize(a, vhost, ResourceExchange, c.Destination, c.Source)
}

func (c QueueDelete) authorize(a Authorizer, vhost string) error {
	return a.CheckConfigure(vhost, ResourceQueue, c.Name)
}

func (c ExchangeDelete) authorize(a Authorizer, vhost string) error {
	return a.CheckConfigure(vhost, ResourceExchange, c.Name)
}

func (c QueuePurge) authorize(a Authorizer, vhost string) error {
	return a.CheckRead(vhost, ResourceQueue, c.Name)
}

// Do runs c for a, after Authorize: the path every front end takes to
// change topology for a user. A server-named queue's name is chosen
// first, so that the permission is checked on it (as RabbitMQ does).
func (v *VHost) Do(a Authorizer, c Command) (Result, error) {
	if q, ok := c.(QueueDeclare); ok && q.Name == "" && !q.Opts.Passive {
		q.Name, q.Opts.generated = "amq.gen-"+randomToken(), true
		c = q
	}
	if err := Authorize(a, v.name, c); err != nil {
		return Result{}, err
	}
	actor := actorName(a)
	if !v.b.events.On() {
		return v.do(c, actor)
	}
	existed := v.commandExisted(c)
	r, err := v.do(c, actor)
	if err == nil {
		v.reportCommand(a, c, r, existed)
	}
	return r, err
}

// do runs an authorized command: a change of topology as a
// TopologyCommand carrying the acting user, through Apply.
func (v *VHost) do(c Command, actor string) (Result, error) {
	switch c := c.(type) {
	case QueueDeclare:
		if c.Opts.Passive {
			info, err := v.DeclareQueue(c.Name, c.Opts)
			return Result{Queue: info}, err
		}
		o := c.Opts
		return v.Apply(TopologyCommand{Op: TopoDeclareQueue, Actor: actor, Name: c.Name, Durable: o.Durable,
			Exclusive: o.Exclusive, AutoDelete: o.AutoDelete, Args: o.Args, Owner: o.Owner, generated: o.generated, turn: o.turn})
	case ExchangeDeclare:
		if c.Opts.Passive {
			return Result{}, v.DeclareExchange(c.Name, c.Type, c.Opts)
		}
		o := c.Opts
		return v.Apply(TopologyCommand{Op: TopoDeclareExchange, Actor: actor, Name: c.Name, Type: c.Type,
			Durable: o.Durable, AutoDelete: o.AutoDelete, Internal: o.Internal, Args: o.Args})
	case QueueBind:
		return v.Apply(TopologyCommand{Op: TopoBind, Actor: actor, Name: c.Queue, ToQueue: true, Source: c.Exchange,
			Key: c.Key, Args: c.Args, Owner: c.Owner})
	case QueueUnbind:
		return v.Apply(TopologyCommand{Op: TopoUnbind, Actor: actor, Name: c.Queue, ToQueue: true, Source: c.Exchange,
			Key: c.Key, Args: c.Args, Owner: c.Owner})
	case ExchangeBind:
		return v.Apply(TopologyCommand{Op: TopoBind, Actor: actor, Name: c.Destination, Source: c.Source,
			Key: c.Key, Args: c.Args})
	case ExchangeUnbind:
		return v.Apply(TopologyCommand{Op: TopoUnbind, Actor: actor, Name: c.Destination, Source: c.Source,
			Key: c.Key, Args: c.Args})
	case QueueDelete:
		return v.Apply(TopologyCommand{Op: TopoDeleteQueue, Actor: actor, Name: c.Name, IfUnused: c.IfUnused,
			IfEmpty: c.IfEmpty, Owner: c.Owner})
	case ExchangeDelete:
		return v.Apply(TopologyCommand{Op: TopoDeleteExchange, Actor: actor, Name: c.Name, IfUnused: c.IfUnused})
	case QueuePurge:
		n, err := v.PurgeQueue(c.Name, c.Owner)
		return Result{Count: n}, err
	}
	return Result{}, errorf(KindInternal, "unknown topology command %T", c)
}
