package operator

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
)

func (e *Env) passwdCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "passwd NAME ROLE",
		Short: "Print a dashboard users-file line: NAME, ROLE and the bcrypt hash of a password read from stdin",
		Long: `Read a password from the first line of stdin and print the line of a dashboard users
file (salvage up --http-users FILE) for NAME with ROLE (viewer or operator):

  echo -n "$PASSWORD" | salvage passwd alice operator >> users.txt

The password itself is stored nowhere.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && line == "" {
				return fmt.Errorf("read the password from stdin: %w", err)
			}
			hash, err := dashboard.HashPassword(strings.TrimRight(line, "\r\n"))
			if err != nil {
				return err
			}
			u := dashboard.User{Name: args[0], Role: dashboard.Role(args[1]), Hash: hash}
			if err := u.Check(); err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "%s %s %s\n", u.Name, u.Role, u.Hash)
			return nil
		},
	}
}
