package auth

// Actor is a user as the identity a core command acts for: it implements
// the core's Authorizer (exchange.Authorizer) with Check, the one
// permission check, so that the core, not a front end, decides which
// permissions a command needs. Unrestricted skips resource permissions:
// the management API's administrators and the broker's own work
// (definitions import by an administrator).
type Actor struct {
	Users        *Users
	User         *User
	Unrestricted bool
}

// CheckConfigure checks configure permission on the resource.
func (a Actor) CheckConfigure(vhost, kind, name string) error {
	return a.check(vhost, Configure, kind, name)
}

// CheckWrite checks write permission on the resource.
func (a Actor) CheckWrite(vhost, kind, name string) error {
	return a.check(vhost, Write, kind, name)
}

// CheckRead checks read permission on the resource.
func (a Actor) CheckRead(vhost, kind, name string) error {
	return a.check(vhost, Read, kind, name)
}

func (a Actor) check(vhost string, p Perm, kind, name string) error {
	if a.Unrestricted {
		return nil
	}
	return a.Users.Check(a.User, vhost, p, kind, name)
}

// Name is the acting user's name ("" when there is none): the core puts
// it in its events as user_who_performed_action.
func (a Actor) Name() string {
	if a.User == nil {
		return ""
	}
	return a.User.Name()
}
