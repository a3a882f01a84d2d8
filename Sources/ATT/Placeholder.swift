// placeholder until the layer lands
enum _PlaceholderATT {}
