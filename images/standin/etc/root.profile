# ~/.profile: executed by Bourne-compatible login shells (root's, as Ubuntu's base-files ships it).

if [ "$BASH" ]; then
  if [ -f ~/.bashrc ]; then
    . ~/.bashrc
  fi
fi

mesg n 2> /dev/null || true
