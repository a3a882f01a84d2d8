// placeholder until the layer lands
enum _PlaceholderGATT {}
