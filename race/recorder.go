package race

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// sent is one command a traced connection sent, and the reply it got.
type sent struct {
	// name is the command's name, lower-case.
	name string
	// reply is the reply as text: "3", "(nil)", "[1 4 0]", "(error) …".
	reply string
	// count is the integer the reply holds (a GET's nil is 0), when hasCount.
	count    int64
	hasCount bool
	// aborted marks an EXEC that Redis aborted: a WATCHed key had changed.
	aborted bool
}

// logged is one decision: the commands from and to (exclusive) of its log.
type logged struct {
	from, to int
	allowed  bool
	failed   bool
}

// clientLog is what one goroutine's traced connection sent, in order, and
// which commands each of its decisions sent. Only that goroutine writes it.
type clientLog struct {
	cmds      []sent
	decisions []logged
	// local is the connection's own address, as dialled.
	local string
}

// mark is where the next decision starts; 0 on a nil log.
func (l *clientLog) mark() int {
	if l == nil {
		return 0
	}
	return len(l.cmds)
}

// decided records a decision that sent the commands since from.
func (l *clientLog) decided(from int, allowed bool, err error) {
	if l == nil {
		return
	}
	l.decisions = append(l.decisions, logged{from: from, to: len(l.cmds), allowed: allowed, failed: err != nil})
}

// reset forgets what was sent, before the trial starts.
func (l *clientLog) reset() {
	l.cmds, l.decisions = l.cmds[:0], l.decisions[:0]
}

// recorder is the go-redis hook that fills a clientLog, on a client of
// one connection.
type recorder struct{ log *clientLog }

var _ redis.Hook = recorder{}

// DialHook notes the connection's local address.
func (r recorder) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			r.log.local = c.LocalAddr().String()
		}
		return c, err
	}
}

// ProcessHook records one command and its reply.
func (r recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// The command may not hold its error yet (a GET's nil): take the
		// one the call returned.
		r.log.cmds = append(r.log.cmds, sentWith(cmd, cmp.Or(err, cmd.Err())))
		return err
	}
}

// ProcessPipelineHook records a pipeline's commands, MULTI and EXEC
// included for a transaction, with the EXEC's reply made of the queued
// commands' (or nil when Redis aborted it).
func (r recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.log.cmds = append(r.log.cmds, sentOf(c))
		}
		n := len(cmds)
		if n >= 2 && cmds[0].Name() == "multi" && cmds[n-1].Name() == "exec" {
			// go-redis reads every +QUEUED into the MULTI, and gives each
			// command of an aborted transaction its error; Redis answered
			// MULTI with +OK, and the EXEC with nil.
			multi, exec := &r.log.cmds[len(r.log.cmds)-n], &r.log.cmds[len(r.log.cmds)-1]
			if err == nil || errors.Is(err, redis.TxFailedErr) {
				multi.reply = "OK"
			}
			switch {
			case errors.Is(err, redis.TxFailedErr):
				exec.reply, exec.aborted = "(nil)", true
			case err == nil:
				replies := make([]string, 0, n-2)
				for _, s := range r.log.cmds[len(r.log.cmds)-n+1 : len(r.log.cmds)-1] {
					replies = append(replies, s.reply)
				}
				exec.reply = "[" + strings.Join(replies, " ") + "]"
			}
		}
		return err
	}
}

// sentOf reads a command's name and reply.
func sentOf(cmd redis.Cmder) sent { return sentWith(cmd, cmd.Err()) }

// sentWith reads a command's name and reply, its error err.
func sentWith(cmd redis.Cmder, err error) sent {
	s := sent{name: cmd.Name()}
	if err != nil {
		if errors.Is(err, redis.Nil) {
			s.reply, s.count, s.hasCount = "(nil)", 0, true
			return s
		}
		s.reply = "(error) " + err.Error()
		return s
	}
	switch c := cmd.(type) {
	case *redis.IntCmd:
		s.count, s.hasCount = c.Val(), true
		s.reply = strconv.FormatInt(c.Val(), 10)
	case *redis.StringCmd:
		s.reply = c.Val()
		n, err := strconv.ParseInt(c.Val(), 10, 64)
		s.count, s.hasCount = n, err == nil
	case *redis.DurationCmd: // PTTL: -2 and -1 as they are, else milliseconds
		v := c.Val()
		if v > 0 {
			v /= 1_000_000
		}
		s.reply = strconv.FormatInt(int64(v), 10)
	case *redis.StatusCmd:
		s.reply = c.Val()
	case *redis.BoolCmd:
		s.reply = strconv.FormatBool(c.Val())
	case *redis.FloatCmd:
		s.reply = strconv.FormatFloat(c.Val(), 'g', -1, 64)
	case interface{ Val() any }: // a *redis.Cmd, or a script call that embeds one
		s.reply = replyText(c.Val())
	case *redis.SliceCmd:
		s.reply = replyText(c.Val())
	case *redis.StringSliceCmd:
		s.reply = replyText(c.Val())
	case *redis.ZSliceCmd:
		parts := make([]string, 0, 2*len(c.Val()))
		for _, z := range c.Val() {
			parts = append(parts, fmt.Sprint(z.Member), strconv.FormatFloat(z.Score, 'f', -1, 64))
		}
		s.reply = "[" + strings.Join(parts, " ") + "]"
	}
	return s
}

// replyText renders a reply of any shape: arrays in brackets, nil as (nil).
func replyText(v any) string {
	switch v := v.(type) {
	case nil:
		return "(nil)"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = replyText(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case []string:
		return "[" + strings.Join(v, " ") + "]"
	case error:
		return "(error) " + v.Error()
	}
	return fmt.Sprint(v)
}
