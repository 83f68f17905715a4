package dashboard

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// Role is what a dashboard user may do.
type Role string

// Roles.
const (
	// RoleViewer sees every page and changes nothing.
	RoleViewer Role = "viewer"
	// RoleOperator also pauses, resumes, replays, resolves, acknowledges,
	// approves, rejects and cancels.
	RoleOperator Role = "operator"
)

// User is a person who signs in to the dashboard: a name, a role and,
// for a sign-in with a password, its bcrypt hash (`salvage passwd`). A
// user named only for its role (behind a trusted proxy) has no hash.
type User struct {
	Name string
	Role Role
	Hash string
}

// ErrBadUsers is a users file Salvage cannot use.
var ErrBadUsers = errors.New("dashboard: bad users file")

// userNameMax bounds a user's name.
const userNameMax = 128

// LoadUsers reads a users file: one user a line, "name role [hash]",
// fields separated by spaces; blank lines and lines starting with # are
// skipped. role is viewer or operator; hash a bcrypt hash (`salvage
// passwd` prints one, so does `htpasswd -nbB`). A name may appear once.
func LoadUsers(path string) ([]User, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadUsers, err)
	}
	defer f.Close()
	var users []User
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || len(fields) > 3 {
			return nil, fmt.Errorf("%w: %s:%d: want \"name role [bcrypt-hash]\"", ErrBadUsers, path, n)
		}
		u := User{Name: fields[0], Role: Role(fields[1])}
		if len(fields) == 3 {
			u.Hash = fields[2]
		}
		if err := u.Check(); err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %w", ErrBadUsers, path, n, err)
		}
		if slices.ContainsFunc(users, func(o User) bool { return o.Name == u.Name }) {
			return nil, fmt.Errorf("%w: %s:%d: user %q appears twice", ErrBadUsers, path, n, u.Name)
		}
		users = append(users, u)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadUsers, path, err)
	}
	return users, nil
}

// Check refuses a user the dashboard cannot sign in: a name too long or
// with a control character, an unknown role, a hash bcrypt cannot read.
func (u User) Check() error {
	if u.Name == "" || len(u.Name) > userNameMax || strings.ContainsFunc(u.Name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("name %q: want 1 to %d printable characters", u.Name, userNameMax)
	}
	if u.Role != RoleViewer && u.Role != RoleOperator {
		return fmt.Errorf("user %s: role %q: want %s or %s", u.Name, u.Role, RoleViewer, RoleOperator)
	}
	if u.Hash != "" {
		if _, err := bcrypt.Cost([]byte(u.Hash)); err != nil {
			return fmt.Errorf("user %s: the hash is not bcrypt (salvage passwd prints one): %w", u.Name, err)
		}
	}
	return nil
}

// HashPassword is the bcrypt hash of password for a users file.
func HashPassword(password string) (string, error) {
	if password == "" {
		return "", errors.New("an empty password")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	return string(h), err
}

// dummyHash is compared against when a sign-in names no user with a
// password, so the answer takes as long as for a wrong password.
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("salvage: no such user"), bcrypt.DefaultCost)

// checkPassword is the user name signs in as with password, if any.
func checkPassword(users []User, name, password string) (User, bool) {
	i := slices.IndexFunc(users, func(u User) bool { return u.Name == name && u.Hash != "" })
	if i < 0 {
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(password))
		return User{}, false
	}
	if bcrypt.CompareHashAndPassword([]byte(users[i].Hash), []byte(password)) != nil {
		return User{}, false
	}
	return users[i], true
}
