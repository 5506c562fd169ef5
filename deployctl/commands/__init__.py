"""One module per verb: `run(args, ui) -> exit status`, composing load -> gather -> plan -> execute -> render."""
