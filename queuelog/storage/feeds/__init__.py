"""Other server processes' job events, heard and handed to this one's listeners."""
