print("blemu")
