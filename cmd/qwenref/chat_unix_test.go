//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Through a pipe, as a shell feeds it: the same replies as the library's
// conversation, and the chat ends at /exit with the pipe still open.
func TestChatThroughPipe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--", "chat", "--chat-template-file", qwen3Tpl, "--max-new-tokens", chatReplyMax)
	cmd.Env = append(os.Environ(), "QWENREF_HOSTILE_CHILD=1")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	_, err = in.Write([]byte(chatSession))
	require.NoError(t, err)
	require.NoError(t, cmd.Wait(), "exits at /exit without end of input: %s", errOut.String()) // in stays open
	in.Close()
	assert.Equal(t, wantChat(t, chatSession), out.String())
	assert.Equal(t, 4, strings.Count(errOut.String(), " prompt tokens, "))
}
